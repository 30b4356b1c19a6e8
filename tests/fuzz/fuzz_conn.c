/* fuzz_conn.c - libFuzzer target for the whole connection core: the state
 * machine between the parser and the socket, which fuzz_parse cannot reach.
 *
 * Input layout: byte 0 picks the server (bit 0: with a file cache), byte 1
 * is the number of control bytes that follow; the rest is what the client
 * sends. Each control byte is one driver action (conn_driver.c): a read or
 * a write of a size from a log scale (so partial writes and byte-at-a-time
 * heads both come up), a timeout, a drain, an output failure, an EOF or
 * reset, or conn_release_idle. After the controls the driver finishes the
 * connection naturally. Invariants are checked after every call; a
 * violation is __builtin_trap(). */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_conn.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct server *srv_cached, *srv_plain;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	fz_servers_open(&srv_cached, &srv_plain);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	const struct server *srv = data[0] & 1 ? srv_cached : srv_plain;
	size_t nctl = data[1];
	if (nctl > size - 2)
		nctl = size - 2;
	fz_drive(srv, data + 2, nctl, data + 2 + nctl, size - 2 - nctl, NULL, NULL);
	return 0;
}
