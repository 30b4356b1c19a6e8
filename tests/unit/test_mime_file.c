/* test_mime_file.c - the types file (mime.types format) over the built-in
 * table, default_type, and the line a bad file is refused at. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../src/http/mime_file.h"
#include "tempfile.h"

static struct mime_overrides *parse(const char *text)
{
	struct mime_overrides *o = NULL;
	char why[256];
	cr_assert_eq(mime_overrides_parse(text, strlen(text), &o, why, sizeof(why)), 0, "%s", why);
	return o;
}

#define LOOK(o, name) mime_lookup(o, name, strlen(name), "application/x-default")

Test(mime_file, overrides_extend_and_default)
{
	struct mime_overrides *o = parse("# comment\n"
					 "\n"
					 "application/x-zzqx\tzzqx ZZQ2\n"
					 "text/x-custom  css   # overrides the built-in\n"
					 "image/png png\r\n"
					 "application/x-later zzqx\n"
					 "application/x-none\n");
	cr_assert_str_eq(LOOK(o, "a.zzqx"), "application/x-later", "a later line wins");
	cr_assert_str_eq(LOOK(o, "a.zzq2"), "application/x-zzqx");
	cr_assert_str_eq(LOOK(o, "dir/A.ZZQ2"), "application/x-zzqx", "case-insensitive");
	cr_assert_str_eq(LOOK(o, "a.css"), "text/x-custom; charset=utf-8", "text types get the charset");
	cr_assert_str_eq(LOOK(o, "a.png"), "image/png");
	cr_assert_str_eq(LOOK(o, "a.html"), "text/html; charset=utf-8", "built-in table still there");
	cr_assert_str_eq(LOOK(o, "a.unknownext"), "application/x-default");
	cr_assert_str_eq(LOOK(o, "noext"), "application/x-default");
	cr_assert_str_eq(LOOK(o, ".zzqx"), "application/x-default", "a dotfile has no extension");
	mime_overrides_free(o);
	cr_assert_str_eq(LOOK(NULL, "a.js"), "text/javascript; charset=utf-8");
	cr_assert_str_eq(LOOK(NULL, "a.qqq"), "application/x-default");
}

Test(mime_file, bad_lines_name_the_line)
{
	struct mime_overrides *o = NULL;
	char why[256];
	const char *t1 = "text/plain txt\nnot-a-type foo\n";
	cr_assert_eq(mime_overrides_parse(t1, strlen(t1), &o, why, sizeof(why)), -1);
	cr_assert(strstr(why, "2: the line does not start with a MIME type"), "%s", why);
	const char *t2 = "text/plain txt\n\ntext/plain .b\n";
	cr_assert_eq(mime_overrides_parse(t2, strlen(t2), &o, why, sizeof(why)), -1);
	cr_assert(strstr(why, "3: word 2 is not a file extension"), "%s", why);
	const char *t4 = "text/plain a..b\n";
	cr_assert_eq(mime_overrides_parse(t4, strlen(t4), &o, why, sizeof(why)), -1);
	const char *t5 = "text/plain b.\n";
	cr_assert_eq(mime_overrides_parse(t5, strlen(t5), &o, why, sizeof(why)), -1);
	const char *t3 = "text/pl\"ain txt\n";
	cr_assert_eq(mime_overrides_parse(t3, strlen(t3), &o, why, sizeof(why)), -1);
}

/* types_file may be pointed at any file the master (root) can read: the
 * message names the line, never its content. */
Test(mime_file, bad_line_content_is_never_echoed)
{
	struct mime_overrides *o = NULL;
	char why[256];
	const char *secret = "root:$y$j9T$s3cr3tHashValue:19000:0:99999:7:::\n";
	cr_assert_eq(mime_overrides_parse(secret, strlen(secret), &o, why, sizeof(why)), -1);
	cr_assert(strstr(why, "1: ") == why, "%s", why);
	cr_assert_null(strstr(why, "s3cr3t"), "%s", why);
	cr_assert_null(strstr(why, "root"), "%s", why);
	const char *ext = "text/plain s3cr3t/word\n";
	cr_assert_eq(mime_overrides_parse(ext, strlen(ext), &o, why, sizeof(why)), -1);
	cr_assert_null(strstr(why, "s3cr3t"), "%s", why);
}

Test(mime_file, load_names_the_file)
{
	char path[64];
	temp_file_with("types", "text/plain txt\n/bad x\n", path, sizeof(path));
	struct mime_overrides *o = NULL;
	char why[512], want[128];
	cr_assert_eq(mime_overrides_load(path, &o, why, sizeof(why)), -1);
	snprintf(want, sizeof(want), "%s:2: ", path);
	cr_assert(strstr(why, want), "%s", why);
	unlink(path);
	cr_assert_eq(mime_overrides_load(path, &o, why, sizeof(why)), -1);
	cr_assert(strstr(why, "No such file"), "%s", why);
}

/* Lines of Debian's /etc/mime.types (media-types 10): extensions of two
 * parts, which only a multi-part lookup could match. The file the README
 * names must load; such an extension is skipped (the lookup uses the last
 * one, as nginx's does), the others on its line still count. */
Test(mime_file, etc_mime_types_multi_part_extensions_load)
{
	struct mime_overrides *o = parse("application/cwl+json\t\t\t\tcwl.json\n"
					 "application/sarif+json\t\t\t\tsarif sarif.json\n"
					 "application/tm+json\t\t\t\ttm.jsonld tm.json jsontm\n"
					 "application/vnd.ieee.1905\t\t\t1905.1\n"
					 "application/x-font-pcf\t\t\t\tpcf pcf.Z\n");
	cr_assert_str_eq(LOOK(o, "a.sarif"), "application/sarif+json; charset=utf-8");
	cr_assert_str_eq(LOOK(o, "a.jsontm"), "application/tm+json; charset=utf-8");
	cr_assert_str_eq(LOOK(o, "a.pcf"), "application/x-font-pcf");
	cr_assert_str_eq(LOOK(o, "a.json"), "application/json; charset=utf-8", "'cwl.json' is not 'json'");
	cr_assert_str_eq(LOOK(o, "a.cwl.json"), "application/json; charset=utf-8");
	cr_assert_str_eq(LOOK(o, "a.1"), "application/x-default");
	mime_overrides_free(o);
}
