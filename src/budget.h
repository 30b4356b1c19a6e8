/* budget.h - the memory that response bodies built in memory (directory
 * listings) may hold in this process: one total, and a share per client, so
 * that a few clients that ask and never read cannot take it all. */
#ifndef SPINDLE_BUDGET_H
#define SPINDLE_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define BUDGET_TOTAL (64u << 20)
#define BUDGET_PER_CLIENT (BUDGET_TOTAL / 4)
#define BUDGET_CLIENTS 1024 /* clients holding bytes at once; beyond, a take is refused */

/* Who a client is, as far as the budget tells them apart: an IPv4 address
 * (IPv4-mapped ones too), or an IPv6 /64, what one site is usually given;
 * every client of a Unix socket is one. */
uint64_t budget_client(const struct sockaddr_storage *peer);

/* Takes n bytes for client: false (and nothing taken) if the total or the
 * client's share would be exceeded. */
bool budget_take(uint64_t client, size_t n);
/* Gives back n of the bytes client took. */
void budget_give(uint64_t client, size_t n);

#endif
