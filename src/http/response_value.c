/* response_value.c - the response value: its fields, its body sources, and
 * the one place that lets go of what it owns. */
#include "response_value.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../budget.h"
#include "../fs/cache.h"

void response_init(struct response *r)
{
	r->status = 0;
	r->close = r->linger = r->broken = r->no_server = r->shed = false;
	r->has_validators = r->ranges = r->vary = false;
	r->validators = (struct http_validators){ 0 };
	r->nfields = 0;
	memset(&r->body, 0, sizeof(r->body));
	r->body.fd = -1;
	r->pieces = NULL;
	r->npieces = 0;
	r->parts = NULL;
	r->stored = 0;
	r->heap = NULL;
	r->lines = NULL;
	r->lines_len = 0;
}

static void body_release(struct response *r)
{
	free(r->body.owned);
	if (r->body.reserved)
		budget_give(r->body.client, r->body.reserved);
	cache_release(r->body.entry);
	if (r->body.fd >= 0)
		close(r->body.fd);
	memset(&r->body, 0, sizeof(r->body));
	r->body.fd = -1;
}

void response_release(struct response *r)
{
	body_release(r);
	free(r->pieces);
	free(r->parts);
	free(r->heap);
	free(r->lines);
	response_init(r);
}

/* ---- fields -------------------------------------------------------- */

void response_field(struct response *r, const char *name, const char *value, size_t len)
{
	if (r->nfields == RESPONSE_FIELDS_MAX) {
		r->broken = true;
		return;
	}
	r->fields[r->nfields++] = (struct response_field){ name, value, len };
}

void response_field_str(struct response *r, const char *name, const char *value)
{
	response_field(r, name, value, strlen(value));
}

char *response_alloc(struct response *r, size_t n)
{
	if (n <= RESPONSE_STORE - r->stored) {
		char *p = r->store + r->stored;
		r->stored += n;
		return p;
	}
	if (!r->heap && (r->heap = malloc(n)))
		return r->heap;
	r->broken = true;
	return NULL;
}

void response_field_copy(struct response *r, const char *name, const char *value, size_t len)
{
	char *p = response_alloc(r, len);
	if (p) {
		memcpy(p, value, len);
		response_field(r, name, p, len);
	}
}

void response_field_lines(struct response *r, const char *lines)
{
	const char *p = lines;
	while (p && *p) {
		const char *colon = strchr(p, ':');
		const char *end = strstr(p, "\r\n");
		if (!colon || !end || colon > end) {
			r->broken = true;
			return;
		}
		/* names in these lines are static text: keep a copy to end it */
		char *name = response_alloc(r, (size_t)(colon - p) + 1);
		if (!name)
			return;
		memcpy(name, p, (size_t)(colon - p));
		name[colon - p] = '\0';
		const char *v = colon + 1;
		while (v < end && *v == ' ')
			v++;
		response_field(r, name, v, (size_t)(end - v));
		p = end + 2;
	}
}

void response_content_length(struct response *r)
{
	response_field(r, "Content-Length", NULL, 0);
}

struct response_field *response_field_find(struct response *r, const char *name)
{
	for (size_t i = 0; i < r->nfields; i++)
		if (strcasecmp(r->fields[i].name, name) == 0)
			return &r->fields[i];
	return NULL;
}

void response_field_insert(struct response *r, const char *before, const char *name, const char *value,
			   size_t len)
{
	struct response_field *at = response_field_find(r, before);
	if (!at) {
		response_field(r, name, value, len);
		return;
	}
	if (r->nfields == RESPONSE_FIELDS_MAX) {
		r->broken = true;
		return;
	}
	size_t i = (size_t)(at - r->fields);
	memmove(&r->fields[i + 1], &r->fields[i], (r->nfields - i) * sizeof(r->fields[0]));
	r->fields[i] = (struct response_field){ name, value, len };
	r->nfields++;
}

void response_line_add(struct response *r, const char *name, const char *value)
{
	size_t nlen = strlen(name), vlen = strlen(value);
	char *p = realloc(r->lines, r->lines_len + nlen + vlen + 4);
	if (!p) {
		r->broken = true;
		return;
	}
	r->lines = p;
	p += r->lines_len;
	memcpy(p, name, nlen);
	memcpy(p + nlen, ": ", 2);
	memcpy(p + nlen + 2, value, vlen);
	memcpy(p + nlen + 2 + vlen, "\r\n", 2);
	r->lines_len += nlen + vlen + 4;
}

void response_field_remove(struct response *r, const char *name)
{
	size_t n = 0;
	for (size_t i = 0; i < r->nfields; i++)
		if (strcasecmp(r->fields[i].name, name) != 0)
			r->fields[n++] = r->fields[i];
	r->nfields = n;
}

void response_fields_keep(struct response *r, const char *const *names)
{
	size_t n = 0;
	for (size_t i = 0; i < r->nfields; i++) {
		bool keep = false;
		for (const char *const *k = names; *k && !keep; k++)
			keep = strcasecmp(r->fields[i].name, *k) == 0;
		if (keep)
			r->fields[n++] = r->fields[i];
	}
	r->nfields = n;
}

/* ---- error pages ------------------------------------------------------ */

void response_error(struct response *r, int status, const char *page, size_t page_len)
{
	response_release(r);
	r->status = status;
	response_field_str(r, "Content-Type", "text/html; charset=utf-8");
	response_content_length(r);
	if (page) {
		response_body_memory(r, page, page_len, NULL);
		return;
	}
	/* the built-in page is the first thing in the store, so it always fits */
	size_t len = http_builtin_page(status, r->store, RESPONSE_STORE);
	r->stored = len;
	r->body.kind = RESPONSE_BODY_INLINE;
	r->body.inline_at = 0;
	r->body.size = r->body.len = len;
}

/* ---- bodies ----------------------------------------------------------- */

void response_body_memory(struct response *r, const char *p, size_t len, char *owned)
{
	body_release(r);
	r->body.kind = RESPONSE_BODY_MEMORY;
	r->body.p = p;
	r->body.owned = owned;
	r->body.size = r->body.len = len;
}

void response_body_entry(struct response *r, struct cache_entry *e)
{
	body_release(r);
	r->body.kind = RESPONSE_BODY_ENTRY;
	r->body.entry = e;
	r->body.size = r->body.len = e->len;
}

void response_body_file(struct response *r, int fd, uint64_t size)
{
	body_release(r);
	r->body.kind = RESPONSE_BODY_FILE;
	r->body.fd = fd;
	r->body.size = r->body.len = size;
}

void response_body_listing(struct response *r, char *owned, size_t len, size_t reserved, uint64_t client)
{
	body_release(r);
	r->body.kind = RESPONSE_BODY_LISTING;
	r->body.p = r->body.owned = owned;
	r->body.size = r->body.len = len;
	r->body.reserved = reserved;
	r->body.client = client;
}

void response_body_drop(struct response *r)
{
	uint64_t size = r->body.size, off = r->body.off, len = r->body.len;
	body_release(r);
	r->body.size = size;
	r->body.off = off;
	r->body.len = len;
}

uint64_t response_length(const struct response *r)
{
	if (!r->pieces)
		return r->body.len;
	uint64_t total = 0;
	for (size_t i = 0; i < r->npieces; i++)
		total += r->pieces[i].len;
	return total;
}

const char *response_body_bytes(const struct response *r, uint64_t off)
{
	switch (r->body.kind) {
	case RESPONSE_BODY_INLINE:
		return r->store + r->body.inline_at + off;
	case RESPONSE_BODY_MEMORY:
	case RESPONSE_BODY_LISTING:
		return r->body.p + (off - r->body.shift);
	case RESPONSE_BODY_ENTRY:
		return r->body.entry->data + off;
	default:
		return NULL;
	}
}

/* Once half of what a listing still holds is sent, the unsent rest moves
 * to the front and the memory behind it goes back, with its bytes in the
 * budget: each byte moves about once. */
#define LISTING_SHRINK_MIN (64 * 1024)

void response_body_sent(struct response *r, uint64_t upto)
{
	if (r->body.kind != RESPONSE_BODY_LISTING || upto <= r->body.shift || upto > r->body.size)
		return;
	size_t done = (size_t)(upto - r->body.shift);
	size_t left = (size_t)(r->body.size - upto);
	if (left == 0 || done < LISTING_SHRINK_MIN || done < left)
		return;
	memmove(r->body.owned, r->body.owned + done, left);
	char *fit = realloc(r->body.owned, left);
	if (fit)
		r->body.owned = fit;
	r->body.p = r->body.owned;
	r->body.shift = upto;
	size_t give = r->body.reserved > left ? r->body.reserved - left : 0;
	budget_give(r->body.client, give);
	r->body.reserved -= give;
}
