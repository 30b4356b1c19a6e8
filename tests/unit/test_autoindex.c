/* test_autoindex.c - directory listings: the query, the sort, escaping in
 * HTML text, links and JSON, the parent link, and the body cap. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/http/autoindex.h"

#define E(n, d, s, t) { (n), sizeof(n) - 1, (d), (s), (t) }

static struct dirlist list_of(struct dir_entry *e, size_t n)
{
	return (struct dirlist){ .entries = e, .n = n };
}

static char *render(enum autoindex_mode mode, const char *dir, const struct dirlist *dl,
		    struct autoindex_order o, size_t *len)
{
	size_t cap = autoindex_body_bound(dir, dl);
	char *buf = malloc(cap + 1);
	cr_assert(buf);
	*len = autoindex_render(buf, cap, mode, dir, dl, o);
	cr_assert(*len > 0 && *len <= cap);
	buf[*len] = '\0';
	return buf;
}

Test(autoindex, query)
{
	struct autoindex_order o = autoindex_parse_query((struct span){ 0 });
	cr_expect(o.key == AUTOINDEX_BY_NAME && !o.desc);
	o = autoindex_parse_query(SPAN_LIT("sort=mtime"));
	cr_expect(o.key == AUTOINDEX_BY_MTIME && !o.desc);
	o = autoindex_parse_query(SPAN_LIT("x=1&sort=size&order=desc"));
	cr_expect(o.key == AUTOINDEX_BY_SIZE && o.desc);
	o = autoindex_parse_query(SPAN_LIT("sort=bogus&order=sideways"));
	cr_expect(o.key == AUTOINDEX_BY_NAME && !o.desc);
	o = autoindex_parse_query(SPAN_LIT("sort=mtimex"));
	cr_expect(o.key == AUTOINDEX_BY_NAME);
}

static void expect_order(const struct dir_entry *e, size_t n, const char *const *want)
{
	for (size_t i = 0; i < n; i++)
		cr_expect_str_eq(e[i].name, want[i], "position %zu", i);
}

Test(autoindex, sort_keys_ties_and_order)
{
	struct dir_entry e[] = {
		E("b", false, 10, 300), E("a", false, 30, 100), E("c", true, 0, 200), E("B", false, 10, 100),
	};
	size_t n = 4;
	autoindex_sort(e, n, (struct autoindex_order){ AUTOINDEX_BY_NAME, false });
	expect_order(e, n, (const char *const[]){ "B", "a", "b", "c" }); /* bytewise */
	autoindex_sort(e, n, (struct autoindex_order){ AUTOINDEX_BY_NAME, true });
	expect_order(e, n, (const char *const[]){ "c", "b", "a", "B" });
	autoindex_sort(e, n, (struct autoindex_order){ AUTOINDEX_BY_MTIME, false });
	expect_order(e, n, (const char *const[]){ "B", "a", "c", "b" }); /* ties by name */
	autoindex_sort(e, n, (struct autoindex_order){ AUTOINDEX_BY_SIZE, false });
	expect_order(e, n, (const char *const[]){ "c", "B", "b", "a" });
	autoindex_sort(e, n, (struct autoindex_order){ AUTOINDEX_BY_SIZE, true });
	expect_order(e, n, (const char *const[]){ "a", "b", "B", "c" });
	autoindex_sort(e, 0, (struct autoindex_order){ AUTOINDEX_BY_SIZE, true }); /* nothing to do */
}

Test(autoindex, html_escapes_text_and_encodes_links)
{
	struct dir_entry e[] = {
		E("<script>&\"'.txt", false, 5, 0), E("a b?#%.html", false, 7, 86400), E("sub dir", true, 0, 0),
	};
	struct dirlist dl = list_of(e, 3);
	size_t len;
	char *b = render(AUTOINDEX_HTML, "docs/x&y", &dl, (struct autoindex_order){ 0 }, &len);
	cr_expect(strstr(b, "<title>Index of /docs/x&amp;y/</title>"), "%s", b);
	cr_expect(strstr(b, "<a href=\"%3Cscript%3E%26%22%27.txt\">&lt;script&gt;&amp;&quot;&#39;.txt</a>"),
		  "%s", b);
	cr_expect(strstr(b, "<a href=\"a%20b%3F%23%25.html\">a b?#%.html</a>"), "%s", b);
	cr_expect(strstr(b, "<a href=\"sub%20dir/\">sub dir/</a>"), "%s", b);
	cr_expect(strstr(b, "<a href=\"../\">../</a>"), "a parent link below the root");
	cr_expect(strstr(b, "<td>1970-01-02 00:00:00</td><td>7</td>"), "dates and sizes: %s", b);
	cr_expect(!strstr(b, "<script>"), "no raw markup from a name");
	cr_expect(!strstr(b, "truncated"));
	free(b);
	b = render(AUTOINDEX_HTML, "", &dl, (struct autoindex_order){ 0 }, &len);
	cr_expect(!strstr(b, "../"), "no parent link at the root");
	cr_expect(strstr(b, "<title>Index of /</title>"));
	free(b);
}

/* The page is declared UTF-8: no raw control byte or ill-formed UTF-8 from a
 * name may reach it; the link keeps the exact bytes. */
Test(autoindex, html_shows_controls_and_bad_utf8_as_characters)
{
	struct dir_entry e[] = {
		E("\x1b[31mred\r.txt", false, 1, 0),   /* ESC, CR */
		E("bad\xff\xc3(.txt", false, 1, 0),     /* not UTF-8, a sequence cut short */
		E("del\x7f c1\xc2\x9b nul", false, 1, 0), /* DEL, a C1 control (CSI) */
		E("caf\xc3\xa9 \xe2\x82\xac", false, 1, 0), /* well-formed: kept */
	};
	struct dirlist dl = list_of(e, 4);
	size_t len;
	char *b = render(AUTOINDEX_HTML, "d\x1b", &dl, (struct autoindex_order){ 0 }, &len);
	cr_expect(strstr(b, "<a href=\"%1B%5B31mred%0D.txt\">\xe2\x90\x9b[31mred\xe2\x90\x8d.txt</a>"), "%s", b);
	cr_expect(strstr(b, "<a href=\"bad%FF%C3%28.txt\">bad\xef\xbf\xbd\xef\xbf\xbd(.txt</a>"), "%s", b);
	cr_expect(strstr(b, ">del\xe2\x90\xa1 c1\xef\xbf\xbd nul</a>"), "%s", b);
	cr_expect(strstr(b, ">caf\xc3\xa9 \xe2\x82\xac</a>"), "%s", b);
	cr_expect(strstr(b, "<title>Index of /d\xe2\x90\x9b/</title>"), "the path too: %s", b);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)b[i];
		cr_expect(ch >= 0x20 || ch == '\n', "a raw control byte 0x%02x at %zu", ch, i);
		cr_expect(ch != 0x7f, "a raw DEL at %zu", i);
		cr_expect(ch != 0xff, "a raw 0xff at %zu", i);
	}
	free(b);
}

Test(autoindex, html_header_links_reverse_the_current_column)
{
	struct dir_entry e[] = { E("a", false, 1, 0) };
	struct dirlist dl = list_of(e, 1);
	size_t len;
	char *b = render(AUTOINDEX_HTML, "", &dl, (struct autoindex_order){ AUTOINDEX_BY_SIZE, false }, &len);
	cr_expect(strstr(b, "href=\"?sort=size&amp;order=desc\""));
	cr_expect(strstr(b, "href=\"?sort=name\""));
	free(b);
}

Test(autoindex, json_escapes_and_types)
{
	struct dir_entry e[] = { E("q\"\\\x01\xff.txt", false, 13, 0), E("d", true, 0, 60) };
	struct dirlist dl = list_of(e, 2);
	size_t len;
	char *b = render(AUTOINDEX_JSON, "a\"b", &dl, (struct autoindex_order){ 0 }, &len);
	const char *want = "{\"path\":\"/a\\\"b/\",\"entries\":[\n"
			   "{\"name\":\"q\\\"\\\\\\u0001\\ufffd.txt\",\"url\":\"q%22%5C%01%FF.txt\","
			   "\"type\":\"file\",\"size\":13,\"mtime\":\"1970-01-01T00:00:00Z\"},\n"
			   "{\"name\":\"d\",\"url\":\"d/\",\"type\":\"directory\",\"size\":null,"
			   "\"mtime\":\"1970-01-01T00:01:00Z\"}\n"
			   "],\"truncated\":false}\n";
	cr_expect_str_eq(b, want);
	free(b);
	struct dirlist empty = list_of(NULL, 0);
	b = render(AUTOINDEX_JSON, "", &empty, (struct autoindex_order){ 0 }, &len);
	cr_expect_str_eq(b, "{\"path\":\"/\",\"entries\":[],\"truncated\":false}\n");
	free(b);
}

Test(autoindex, body_cap_cuts_at_an_entry_and_says_so)
{
	/* 50,000 names of 200 bytes: far more than AUTOINDEX_MAX_BODY */
	size_t n = 50000;
	struct dir_entry *e = calloc(n, sizeof(*e));
	char *names = malloc(n * 201);
	cr_assert(e && names);
	for (size_t i = 0; i < n; i++) {
		char *nm = names + i * 201;
		memset(nm, 'x', 200);
		snprintf(nm, 12, "%010zu", i);
		nm[10] = 'x';
		nm[200] = '\0';
		e[i] = (struct dir_entry){ nm, 200, false, i, 0 };
	}
	struct dirlist dl = list_of(e, n);
	for (int mode = AUTOINDEX_HTML; mode <= AUTOINDEX_JSON; mode++) {
		size_t cap = autoindex_body_bound("", &dl);
		cr_expect_eq(cap, AUTOINDEX_MAX_BODY);
		char *b = malloc(cap);
		size_t len = autoindex_render(b, cap, mode, "", &dl, (struct autoindex_order){ 0 });
		cr_expect(len > cap / 2 && len <= cap);
		if (mode == AUTOINDEX_JSON) {
			cr_expect(len > 20 && memcmp(b + len - 20, "],\"truncated\":true}\n", 20) == 0);
			cr_expect(b[len - 22] == '}', "the last entry is whole");
		} else {
			cr_expect(memmem(b, len, "truncated", 9) != NULL);
			cr_expect(memcmp(b + len - 15, "</body></html>\n", 15) == 0);
		}
		free(b);
	}
	/* a list read with more entries than it keeps says so even when it fits */
	struct dirlist few = list_of(e, 2);
	few.truncated = true;
	size_t len;
	char *b = render(AUTOINDEX_JSON, "", &few, (struct autoindex_order){ 0 }, &len);
	cr_expect(strstr(b, "\"truncated\":true"));
	free(b);
	free(e);
	free(names);
}

Test(autoindex, etag_is_weak_and_varies_with_what_changes_the_body)
{
	char a[HTTP_ETAG_MAX], b[HTTP_ETAG_MAX];
	struct timespec t = { 1000, 5 };
	size_t na = autoindex_etag(a, t, AUTOINDEX_HTML, (struct autoindex_order){ 0 });
	cr_expect(na > 4 && memcmp(a, "W/\"", 3) == 0 && a[na - 1] == '"');
	autoindex_etag(b, t, AUTOINDEX_JSON, (struct autoindex_order){ 0 });
	cr_expect(strcmp(a, b) != 0);
	autoindex_etag(b, t, AUTOINDEX_HTML, (struct autoindex_order){ AUTOINDEX_BY_MTIME, true });
	cr_expect(strcmp(a, b) != 0);
	t.tv_nsec++; /* a change within the same second */
	autoindex_etag(b, t, AUTOINDEX_HTML, (struct autoindex_order){ 0 });
	cr_expect(strcmp(a, b) != 0);
}
