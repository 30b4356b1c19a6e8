/* encoding.c - which precompressed sidecar a request gets: Accept-Encoding
 * with q-values, "identity" and "*" (RFC 9110 12.5.3). Pure: bytes in, a
 * choice out. */
#include "encoding.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "parse.h"

static const char *const coding_names[CODING_COUNT] = { "br", "zstd", "gzip" };
static const char *const coding_suffixes[CODING_COUNT] = { ".br", ".zst", ".gz" };

const char *encoding_name(enum content_coding c)
{
	return coding_names[c];
}

const char *encoding_suffix(enum content_coding c)
{
	return coding_suffixes[c];
}

static int coding_of(const char *p, size_t n)
{
	for (int c = 0; c < CODING_COUNT; c++)
		if (strlen(coding_names[c]) == n && strncasecmp(p, coding_names[c], n) == 0)
			return c;
	/* RFC 9110 8.4.1.3: a recipient SHOULD treat x-gzip as gzip */
	if (n == 6 && strncasecmp(p, "x-gzip", 6) == 0)
		return CODING_GZIP;
	return -1;
}

int encoding_prefs_parse(const char *s, struct encoding_prefs *prefs, char *why, size_t whylen)
{
	prefs->n = 0;
	if (strcmp(s, "off") == 0)
		return 0;
	while (*s) {
		size_t skip = strspn(s, " \t,");
		s += skip;
		size_t n = strcspn(s, " \t,");
		if (n == 0)
			break;
		int c = coding_of(s, n);
		if (c < 0 || (n == 6 && strncasecmp(s, "x-gzip", 6) == 0)) {
			snprintf(why, whylen, "'%.*s' is not br, zstd or gzip", (int)n, s);
			return -1;
		}
		for (size_t i = 0; i < prefs->n; i++) {
			if (prefs->order[i] == c) {
				snprintf(why, whylen, "'%.*s' is listed twice", (int)n, s);
				return -1;
			}
		}
		prefs->order[prefs->n++] = (uint8_t)c;
		s += n;
	}
	return 0;
}

void encoding_prefs_format(const struct encoding_prefs *prefs, char *out, size_t cap)
{
	size_t len = 0;
	out[0] = '\0';
	for (size_t i = 0; i < prefs->n && len < cap; i++)
		len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? " " : "", coding_names[prefs->order[i]]);
}

/* A qvalue (RFC 9110 12.4.2: "0" ["." 0*3DIGIT] / "1" ["." 0*3("0")]) in
 * thousandths; -1 when malformed. */
static int qvalue_parse(const char *p, const char *end)
{
	if (p == end || (*p != '0' && *p != '1'))
		return -1;
	int q = (*p - '0') * 1000, scale = 100;
	p++;
	if (p == end)
		return q;
	if (*p++ != '.')
		return -1;
	for (int digits = 0; p < end; p++, digits++) {
		if (digits == 3 || *p < '0' || *p > '9')
			return -1;
		q += (*p - '0') * scale;
		scale /= 10;
	}
	return q > 1000 ? -1 : q;
}

/* The weight of one member's parameters ("; q=0.5"): 1000 without one, -1
 * when malformed (the member is then ignored rather than guessed at). */
static int member_weight(const char *p, const char *end)
{
	int q = 1000;
	while (p < end) {
		while (p < end && (*p == ' ' || *p == '\t' || *p == ';'))
			p++;
		const char *param = p;
		while (p < end && *p != ';')
			p++;
		const char *pend = p;
		while (pend > param && (pend[-1] == ' ' || pend[-1] == '\t'))
			pend--;
		if (pend == param)
			continue;
		const char *eq = memchr(param, '=', (size_t)(pend - param));
		if (!eq)
			return -1;
		const char *name_end = eq, *val = eq + 1;
		while (name_end > param && (name_end[-1] == ' ' || name_end[-1] == '\t'))
			name_end--;
		while (val < pend && (*val == ' ' || *val == '\t'))
			val++;
		if (name_end - param == 1 && (*param | 0x20) == 'q')
			q = qvalue_parse(val, pend);
		if (q < 0)
			return -1;
	}
	return q;
}

int encoding_choose(struct span accept, unsigned lines, const struct encoding_prefs *prefs, unsigned available)
{
	int q[CODING_COUNT], q_identity = -1, q_star = -1;
	for (int c = 0; c < CODING_COUNT; c++)
		q[c] = -1; /* not listed */
	if (!accept.p)
		return ENCODING_IDENTITY;

	const char *cursor = NULL;
	struct span line;
	while (http_field_lines_next(accept, lines, "accept-encoding", &cursor, &line)) {
		const char *p = line.p, *end = line.p + line.len;
		struct span m;
		while (http_list_member_next(&p, end, &m)) {
			const char *tok = m.p, *mend = m.p + m.len, *params = tok;
			while (params < mend && *params != ';' && *params != ' ' && *params != '\t')
				params++;
			size_t toklen = (size_t)(params - tok);
			if (toklen == 0)
				continue;
			int w = member_weight(params, mend);
			if (w < 0)
				continue;
			/* a coding listed twice: the first member counts */
			int c = coding_of(tok, toklen);
			if (c >= 0) {
				if (q[c] < 0)
					q[c] = w;
			} else if (toklen == 8 && strncasecmp(tok, "identity", 8) == 0) {
				if (q_identity < 0)
					q_identity = w;
			} else if (toklen == 1 && *tok == '*') {
				if (q_star < 0)
					q_star = w;
			}
		}
	}

	int best = ENCODING_IDENTITY, best_q = 0;
	for (size_t i = 0; i < prefs->n; i++) {
		int c = prefs->order[i];
		int qc = q[c] >= 0 ? q[c] : q_star >= 0 ? q_star : 0;
		if ((available & (1u << c)) && qc > best_q) {
			best = c;
			best_q = qc;
		}
	}
	/* identity is acceptable unless refused by name, or by "*" without
	 * being named (12.5.3); only a weight given explicitly competes with a
	 * coding, so "gzip;q=0.5, identity" means identity */
	bool identity_weighed = q_identity >= 0 || q_star >= 0;
	int qi = q_identity >= 0 ? q_identity : q_star >= 0 ? q_star : 1000;
	if (best >= 0 && !(identity_weighed && qi > best_q))
		return best;
	return qi > 0 ? ENCODING_IDENTITY : ENCODING_NOT_ACCEPTABLE;
}
