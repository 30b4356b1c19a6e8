/* test_listen_config.c - `listen` lines: every address form and
 * option parses into struct listen_addr and prints back the same, bad ones
 * are refused with a message naming the problem, and repeated lines add up. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../src/config.h"

struct listen_case {
	const char *value;
	const char *printed; /* NULL: refused */
};

static const struct listen_case cases[] = {
	{ "127.0.0.1:8080", "127.0.0.1:8080" },
	{ "*:80", "*:80" },
	{ "8080", "*:8080" },
	{ "[::]:8080", "[::]:8080" },
	{ "[::]:8080 ipv6only=on", "[::]:8080" },
	{ "[::]:8080 ipv6only=off", "[::]:8080 ipv6only=off" },
	{ "[::1]:9000   tls", "[::1]:9000 tls" },
	{ "0.0.0.0:8443 tls", "0.0.0.0:8443 tls" },
	{ "unix:/run/spindle.sock", "unix:/run/spindle.sock" },
	{ "unix:/run/spindle.sock mode=0660 owner=www-data group=adm", "unix:/run/spindle.sock mode=0660 owner=www-data group=adm" },
	{ "unix:/tmp/s mode=600", "unix:/tmp/s mode=0600" },
	{ "127.0.0.1:8080 http2_only", "127.0.0.1:8080 http2_only" },
	{ "[::1]:8443 http2_only tls", "[::1]:8443 tls http2_only" },
	{ "unix:/tmp/s http2_only proxy_protocol", "unix:/tmp/s proxy_protocol http2_only" },
	/* refused */
	{ "", NULL },
	{ "   ", NULL },
	{ "localhost:8080", NULL },          /* names are not looked up */
	{ "::1:8080", NULL },                /* IPv6 without brackets */
	{ "[::1]8080", NULL },
	{ "[::1", NULL },
	{ "[nope]:80", NULL },
	{ "127.0.0.1:0", NULL },
	{ "127.0.0.1:65536", NULL },
	{ "127.0.0.1:", NULL },
	{ "127.0.0.1:80x", NULL },
	{ "300.0.0.1:80", NULL },
	{ "unix:", NULL },
	{ "127.0.0.1:80 ipv6only=on", NULL }, /* not an IPv6 address */
	{ "[::]:80 ipv6only=maybe", NULL },
	{ "127.0.0.1:80 mode=0660", NULL },   /* mode/owner/group: UNIX only */
	{ "127.0.0.1:80 owner=www-data", NULL },
	{ "unix:/tmp/s mode=0999", NULL },
	{ "unix:/tmp/s mode=", NULL },
	{ "unix:/tmp/s owner=", NULL },
	{ "127.0.0.1:80 tls=on", NULL },
	{ "127.0.0.1:80 http2_only=on", NULL },
	{ "127.0.0.1:80 http2-only", NULL },  /* options are spelt as config keys are */
	{ "127.0.0.1:80 backlog=5", NULL },
	/* control characters cannot be written to server.conf and read back
	 * (a trailing CR is whitespace to the file reader): found by fuzz_config */
	{ "unix:/run/s.sock\r", NULL },
	{ "127.0.0.1:80\x01", NULL },
	{ "unix:/tmp/s owner=www\x7f", NULL },
	{ "unix:/tmp/s\vmode=0660", NULL },
};

Test(listen_config, forms_parse_and_print_back)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct listen_addr a, again;
		char why[256] = "", buf[256];
		int r = listen_addr_parse(cases[i].value, &a, why, sizeof(why));
		if (!cases[i].printed) {
			cr_expect_eq(r, -1, "'%s' should be refused", cases[i].value);
			cr_expect(strncmp(why, "listen: ", 8) == 0, "'%s': message names the key: %s", cases[i].value, why);
			continue;
		}
		cr_assert_eq(r, 0, "'%s': %s", cases[i].value, why);
		listen_addr_format(&a, buf, sizeof(buf));
		cr_expect_str_eq(buf, cases[i].printed, "'%s'", cases[i].value);
		/* what --check prints parses to the same address */
		cr_assert_eq(listen_addr_parse(buf, &again, why, sizeof(why)), 0, "%s: %s", buf, why);
		cr_expect(listen_addr_same(&a, &again) && a.tls == again.tls && a.ipv6only == again.ipv6only &&
			  a.mode == again.mode && a.proxy_protocol == again.proxy_protocol &&
			  a.http2_only == again.http2_only, "%s", buf);
	}
}

Test(listen_config, fields)
{
	struct listen_addr a;
	char why[256];
	cr_assert_eq(listen_addr_parse("[::1]:8443 ipv6only=off tls", &a, why, sizeof(why)), 0, "%s", why);
	cr_expect_eq(a.kind, LISTEN_TCP);
	cr_expect_str_eq(a.host, "::1");
	cr_expect_eq(a.port, 8443);
	cr_expect(!a.ipv6only);
	cr_expect(a.tls);
	cr_expect(!a.http2_only);
	cr_assert_eq(listen_addr_parse("127.0.0.1:8080 http2_only", &a, why, sizeof(why)), 0, "%s", why);
	cr_expect(a.http2_only && !a.tls);
	cr_assert_eq(listen_addr_parse("unix:/run/s.sock mode=0660 owner=www-data", &a, why, sizeof(why)), 0);
	cr_expect_eq(a.kind, LISTEN_UNIX);
	cr_expect_str_eq(a.path, "/run/s.sock");
	cr_expect_eq(a.mode, 0660);
	cr_expect_str_eq(a.owner, "www-data");
	cr_expect(!a.tls);
	cr_assert_eq(listen_addr_parse("8080", &a, why, sizeof(why)), 0);
	cr_expect_str_eq(a.host, "", "a port alone listens on every address");
	cr_expect_eq(a.mode, -1);
}

/* Repeated lines in a file add up; the same address twice is refused. */
Test(listen_config, repeated_lines_in_a_file)
{
	char path[] = "/tmp/spindle-listen-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	const char *text = "[server]\nlisten = 127.0.0.1:8080\nlisten = [::1]:8080\nlisten = unix:/tmp/x.sock\n"
			   "user = www-data\n";
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	struct config cfg;
	config_defaults(&cfg);
	cr_assert_eq(cfg.nlisten, 0, "no listen line by default: bind and port apply");
	cr_assert_eq(config_load_file(&cfg, path), 0);
	cr_expect_eq(cfg.nlisten, 3);
	cr_expect_str_eq(cfg.listen[1].host, "::1");
	cr_expect_str_eq(cfg.listen[2].path, "/tmp/x.sock");
	cr_expect_str_eq(cfg.user, "www-data");
	cr_assert_eq(config_set(&cfg, "listen", "[::1]:8080 tls", "--set"), 0);
	cr_expect_eq(config_validate(&cfg), -1, "the same address twice");
	unlink(path);
}

/* --check prints every listen line back, and what it prints loads again. */
Test(listen_config, check_output_reads_back)
{
	struct config cfg, back;
	char path[] = "/tmp/spindle-listen-print-XXXXXX";
	config_defaults(&cfg);
	cr_assert_eq(config_set(&cfg, "listen", "[::]:8080 ipv6only=off", "--set"), 0);
	cr_assert_eq(config_set(&cfg, "listen", "unix:/tmp/y.sock mode=0600", "--set"), 0);
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	config_print(&cfg, f);
	fclose(f);
	config_defaults(&back);
	cr_assert_eq(config_load_file(&back, path), 0);
	unlink(path);
	cr_assert_eq(back.nlisten, 2);
	cr_expect(!back.listen[0].ipv6only);
	cr_expect_eq(back.listen[1].mode, 0600);
	cr_expect_str_eq(back.user, "", "printed as off, read back as none");
}
