/* budget.c - the process's budget for in-memory response bodies, with a
 * share per client (budget.h). A listing takes and gives bytes a few times
 * per response, so one mutex and a linear scan of the holders are cheap. */
#include "budget.h"

#include <netinet/in.h>
#include <pthread.h>
#include <string.h>

struct holder {
	uint64_t client;
	size_t bytes; /* 0: a free slot */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static size_t total;
static struct holder holders[BUDGET_CLIENTS];

uint64_t budget_client(const struct sockaddr_storage *peer)
{
	uint64_t k = 0;

	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)peer;
		return 0xffffffff00000000ull | ntohl(a->sin_addr.s_addr);
	}
	if (peer->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)peer)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a)) {
			uint32_t v4;
			memcpy(&v4, a->s6_addr + 12, 4);
			return 0xffffffff00000000ull | ntohl(v4);
		}
		for (int i = 0; i < 8; i++)
			k = k << 8 | a->s6_addr[i];
		return k;
	}
	return 0;
}

/* The client's slot, or a free one for it; NULL when all are taken. */
static struct holder *find_locked(uint64_t client)
{
	struct holder *free_slot = NULL;

	for (size_t i = 0; i < BUDGET_CLIENTS; i++) {
		if (holders[i].bytes && holders[i].client == client)
			return &holders[i];
		if (!holders[i].bytes && !free_slot)
			free_slot = &holders[i];
	}
	if (free_slot)
		free_slot->client = client;
	return free_slot;
}

bool budget_take(uint64_t client, size_t n)
{
	bool ok = false;

	if (n == 0)
		return true;
	pthread_mutex_lock(&mu);
	struct holder *h = find_locked(client);
	if (h && total + n <= BUDGET_TOTAL && h->bytes + n <= BUDGET_PER_CLIENT) {
		h->bytes += n;
		total += n;
		ok = true;
	}
	pthread_mutex_unlock(&mu);
	return ok;
}

void budget_give(uint64_t client, size_t n)
{
	if (n == 0)
		return;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < BUDGET_CLIENTS; i++) {
		if (holders[i].bytes && holders[i].client == client) {
			size_t k = n < holders[i].bytes ? n : holders[i].bytes;
			holders[i].bytes -= k;
			total -= k;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
}
