/* mime_file.c - the types file: /etc/mime.types or a file of
 * the same format, parsed once at start-up into a sorted table that is
 * searched before the built-in one (mime.c).
 *
 * Types from the file get "; charset=utf-8" where the built-in table has it
 * (text types, JSON, XML), so naming /etc/mime.types does not make browsers
 * guess the encoding of every HTML page again. */
#include "mime_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mime.h"

#define MIME_FILE_MAX (4 << 20)  /* /etc/mime.types is ~60 KB */
#define MIME_FILE_EXT_MAX 32
#define MIME_FILE_TYPE_MAX 200

struct mime_override {
	char ext[MIME_FILE_EXT_MAX];  /* lower case */
	char *type;
	size_t line;                  /* later lines win */
};

struct mime_overrides {
	struct mime_override *v;
	size_t n, cap;
};

void mime_overrides_free(struct mime_overrides *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->n; i++)
		free(o->v[i].type);
	free(o->v);
	free(o);
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);
	return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* The type as served: with the charset the built-in table would give it. */
static char *type_with_charset(const char *t, size_t n)
{
	bool text = (n > 5 && memcmp(t, "text/", 5) == 0) || ends_with(t, n, "+json") || ends_with(t, n, "+xml") ||
		    (n == 16 && memcmp(t, "application/json", 16) == 0) ||
		    (n == 15 && memcmp(t, "application/xml", 15) == 0) ||
		    (n == 22 && memcmp(t, "application/javascript", 22) == 0);
	const char *cs = text && !memchr(t, ';', n) ? "; charset=utf-8" : "";
	char *out = malloc(n + strlen(cs) + 1);
	if (out)
		snprintf(out, n + strlen(cs) + 1, "%.*s%s", (int)n, t, cs);
	return out;
}

static int by_ext_then_line(const void *a, const void *b)
{
	const struct mime_override *x = a, *y = b;
	int c = strcmp(x->ext, y->ext);
	return c ? c : (x->line < y->line ? -1 : x->line > y->line);
}

static bool is_token_char(unsigned char ch)
{
	return ch > 0x20 && ch < 0x7f && !strchr("\"(),:;<=>?@[\\]{}", ch);
}

int mime_overrides_parse(const char *text, size_t len, struct mime_overrides **out, char *why, size_t whylen)
{
	struct mime_overrides *o = calloc(1, sizeof(*o));
	size_t lineno = 0;
	const char *p = text, *end = text + len;

	if (!o)
		goto oom;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *lend = eol ? eol : end;
		lineno++;
		const char *hash = memchr(p, '#', (size_t)(lend - p));
		if (hash)
			lend = hash;
		const char *t = p;
		while (t < lend && (*t == ' ' || *t == '\t' || *t == '\r'))
			t++;
		const char *tend = t;
		while (tend < lend && *tend != ' ' && *tend != '\t' && *tend != '\r')
			tend++;
		if (tend > t) {
			/* RFC 6838 4.2: type "/" subtype, both restricted tokens */
			size_t tn = (size_t)(tend - t);
			const char *slash = memchr(t, '/', tn);
			bool valid = slash && slash > t && slash + 1 < tend && tn < MIME_FILE_TYPE_MAX &&
				     !memchr(slash + 1, '/', (size_t)(tend - slash - 1));
			for (const char *c = t; valid && c < tend; c++)
				valid = *c == '/' || is_token_char((unsigned char)*c);
			if (!valid) {
				/* never the line itself: the file may be one only root
				 * may read, pointed at to have a line of it printed */
				snprintf(why, whylen, "%zu: the line does not start with a MIME type (type/subtype, "
					 "letters, digits and !#$&^_.+-, under %d characters)", lineno, MIME_FILE_TYPE_MAX);
				goto fail;
			}
			int word = 1;
			for (const char *e = tend; e < lend; word++) {
				while (e < lend && (*e == ' ' || *e == '\t' || *e == '\r'))
					e++;
				const char *eend = e;
				while (eend < lend && *eend != ' ' && *eend != '\t' && *eend != '\r')
					eend++;
				size_t en = (size_t)(eend - e);
				if (en == 0)
					break;
				bool ok = en < MIME_FILE_EXT_MAX && e[0] != '.' && e[en - 1] != '.';
				bool multi_part = false;
				for (size_t i = 0; ok && i < en; i++) {
					ok = is_token_char((unsigned char)e[i]) && e[i] != '/' &&
					     !(e[i] == '.' && e[i + 1] == '.');
					multi_part |= e[i] == '.';
				}
				if (!ok) {
					snprintf(why, whylen, "%zu: word %d is not a file extension (up to %d "
						 "characters, no '/', no '.' at either end)", lineno, word + 1,
						 MIME_FILE_EXT_MAX - 1);
					goto fail;
				}
				/* "cwl.json" (Debian's /etc/mime.types has a few): the
				 * lookup, as nginx's, takes only the last extension, so
				 * it could never match; skipped, not refused */
				if (multi_part) {
					e = eend;
					continue;
				}
				if (o->n == o->cap) {
					size_t cap = o->cap ? 2 * o->cap : 64;
					struct mime_override *v = realloc(o->v, cap * sizeof(*v));
					if (!v)
						goto oom;
					o->v = v;
					o->cap = cap;
				}
				struct mime_override *m = &o->v[o->n];
				for (size_t i = 0; i < en; i++)
					m->ext[i] = (char)(e[i] >= 'A' && e[i] <= 'Z' ? e[i] + ('a' - 'A') : e[i]);
				m->ext[en] = '\0';
				m->line = lineno;
				if (!(m->type = type_with_charset(t, tn)))
					goto oom;
				o->n++;
				e = eend;
			}
		}
		p = eol ? eol + 1 : end;
	}
	/* sorted by extension, the last line's entry kept for each */
	qsort(o->v, o->n, sizeof(*o->v), by_ext_then_line);
	size_t k = 0;
	for (size_t i = 0; i < o->n; i++) {
		if (k > 0 && strcmp(o->v[k - 1].ext, o->v[i].ext) == 0) {
			free(o->v[k - 1].type);
			o->v[k - 1] = o->v[i];
		} else {
			o->v[k++] = o->v[i];
		}
	}
	o->n = k;
	*out = o;
	return 0;
oom:
	snprintf(why, whylen, "%zu: out of memory", lineno);
fail:
	mime_overrides_free(o);
	return -1;
}

int mime_overrides_load(const char *path, struct mime_overrides **out, char *why, size_t whylen)
{
	char inner[256];
	struct stat st;
	char *text = NULL;
	int rc = -1;
	/* non-blocking: a FIFO must not hang --check or the master (refused below) */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		goto done;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > MIME_FILE_MAX) {
		snprintf(why, whylen, "%s: not a regular file of at most %d bytes", path, MIME_FILE_MAX);
		goto done;
	}
	text = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	while (text && got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (!text || got != (size_t)st.st_size) {
		snprintf(why, whylen, "%s: %s", path, text ? "short read" : "out of memory");
		goto done;
	}
	if (mime_overrides_parse(text, got, out, inner, sizeof(inner)) < 0) {
		snprintf(why, whylen, "%s:%s", path, inner);
		goto done;
	}
	rc = 0;
done:
	free(text);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* The extension of the last path component, or NULL (same rules as mime.c). */
static const char *extension(const char *name, size_t len, size_t *n)
{
	for (size_t i = len; i > 0; i--) {
		char c = name[i - 1];
		if (c == '/')
			return NULL;
		if (c == '.') {
			if (i == len || i == 1 || name[i - 2] == '/')
				return NULL;
			*n = len - i;
			return name + i;
		}
	}
	return NULL;
}

const char *mime_lookup(const struct mime_overrides *o, const char *name, size_t len, const char *default_type)
{
	size_t n;
	if (o && o->n) {
		const char *e = extension(name, len, &n);
		char ext[MIME_FILE_EXT_MAX];
		if (e && n < sizeof(ext)) {
			for (size_t i = 0; i < n; i++)
				ext[i] = (char)(e[i] >= 'A' && e[i] <= 'Z' ? e[i] + ('a' - 'A') : e[i]);
			ext[n] = '\0';
			size_t lo = 0, hi = o->n;
			while (lo < hi) {
				size_t mid = lo + (hi - lo) / 2;
				int cmp = strcmp(ext, o->v[mid].ext);
				if (cmp == 0)
					return o->v[mid].type;
				if (cmp < 0)
					hi = mid;
				else
					lo = mid + 1;
			}
		}
	}
	const char *t = mime_type_find(name, len);
	return t ? t : default_type;
}
