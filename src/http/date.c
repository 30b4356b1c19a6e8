/* date.c - HTTP dates (RFC 9110 5.6.7): format IMF-fixdate, parse all three
 * forms, and keep a per-thread "now" string for the Date header.
 *
 * No strftime/strptime: they follow the locale (LC_TIME could turn "Sun" into
 * "dim."), and the format is fixed-width, so writing digits is simpler.
 *
 * Parsing policy:
 *  - Day and month names are matched case-insensitively, and so is "GMT".
 *    RFC 9110 5.6.7 calls HTTP-date case-sensitive, but it also asks
 *    recipients to be robust, and a date we fail to parse only costs a full
 *    200 instead of a 304.
 *  - The day name must be a real one of the right form (short for
 *    IMF-fixdate and asctime, long for RFC 850), but it is NOT checked
 *    against the date: the numbers are what the validators compare, and a
 *    wrong weekday is a sender bug that changes nothing for us.
 *  - Fields are range-checked (day against the month and leap year, hour
 *    0-23, minute 0-59, second 0-60 for a leap second) so timegm() never
 *    silently normalises "Feb 30" into March.
 */
#include "date.h"

#include <string.h>
#include <strings.h>

static const char date_wkday[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
static const char *const date_wkday_long[7] = {
	"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
};
static const char date_month[12][4] = {
	"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
};

/* 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the 4DIGIT year's range. */
#define DATE_MIN ((time_t)-62167219200LL)
#define DATE_MAX ((time_t)253402300799LL)

static void date_put2(char *p, int v)
{
	p[0] = (char)('0' + v / 10);
	p[1] = (char)('0' + v % 10);
}

void http_date_format(time_t t, char out[HTTP_DATE_LEN + 1])
{
	struct tm tm;

	/* Clamp rather than fail: the caller always gets a well-formed
	 * date, and no file on a real disk is dated outside these years. */
	if (t < DATE_MIN)
		t = DATE_MIN;
	if (t > DATE_MAX)
		t = DATE_MAX;
	gmtime_r(&t, &tm);

	int year = tm.tm_year + 1900;
	/* "Sun, 06 Nov 1994 08:49:37 GMT" */
	memcpy(out, date_wkday[tm.tm_wday], 3);
	out[3] = ',';
	out[4] = ' ';
	date_put2(out + 5, tm.tm_mday);
	out[7] = ' ';
	memcpy(out + 8, date_month[tm.tm_mon], 3);
	out[11] = ' ';
	date_put2(out + 12, year / 100);
	date_put2(out + 14, year % 100);
	out[16] = ' ';
	date_put2(out + 17, tm.tm_hour);
	out[19] = ':';
	date_put2(out + 20, tm.tm_min);
	out[22] = ':';
	date_put2(out + 23, tm.tm_sec);
	memcpy(out + 25, " GMT", 4);
	out[HTTP_DATE_LEN] = '\0';
}

/* Exactly n ASCII digits at p. */
static bool date_num(const char *p, size_t n, int *out)
{
	int v = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10 + (p[i] - '0');
	}
	*out = v;
	return true;
}

static int date_find_month(const char *p)
{
	for (int i = 0; i < 12; i++)
		if (strncasecmp(p, date_month[i], 3) == 0)
			return i;
	return -1;
}

static bool date_is_wkday(const char *p)
{
	for (int i = 0; i < 7; i++)
		if (strncasecmp(p, date_wkday[i], 3) == 0)
			return true;
	return false;
}

/* "HH:MM:SS" (time-of-day, RFC 9110 5.6.7). */
static bool date_time(const char *p, struct tm *tm)
{
	return date_num(p, 2, &tm->tm_hour) && p[2] == ':' && date_num(p + 3, 2, &tm->tm_min) &&
	       p[5] == ':' && date_num(p + 6, 2, &tm->tm_sec);
}

static bool date_is_leap(int year)
{
	return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

/* tm_year holds the full year here, not year - 1900. */
static bool date_valid(const struct tm *tm)
{
	static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int dim;

	if (tm->tm_mon < 0 || tm->tm_mon > 11 || tm->tm_year < 0 || tm->tm_year > 9999)
		return false;
	dim = mdays[tm->tm_mon] + (tm->tm_mon == 1 && date_is_leap(tm->tm_year));
	return tm->tm_mday >= 1 && tm->tm_mday <= dim && tm->tm_hour <= 23 && tm->tm_min <= 59 &&
	       tm->tm_sec <= 60;
}

/* RFC 9110 5.6.7: a two-digit year "that appears to be more than 50 years
 * in the future" is the most recent past year with those digits, i.e. pick
 * the year with those last two digits in [now - 49, now + 50]. */
static int date_rfc850_year(int yy, time_t now)
{
	struct tm tm;
	int cur = 1970;

	if (gmtime_r(&now, &tm) != NULL)
		cur = tm.tm_year + 1900;
	int hi = cur + 50;
	return hi - (((hi - yy) % 100) + 100) % 100;
}

bool http_date_parse_at(struct span s, time_t now, time_t *out)
{
	const char *p = s.p;
	size_t len = s.len;
	struct tm tm = { 0 };
	int yy;

	if (p == NULL || len < 24)
		return false;

	if (len == 29 && p[3] == ',') {
		/* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
		if (!date_is_wkday(p) || p[4] != ' ' || !date_num(p + 5, 2, &tm.tm_mday) ||
		    p[7] != ' ' || (tm.tm_mon = date_find_month(p + 8)) < 0 || p[11] != ' ' ||
		    !date_num(p + 12, 4, &tm.tm_year) || p[16] != ' ' || !date_time(p + 17, &tm) ||
		    strncasecmp(p + 25, " GMT", 4) != 0)
			return false;
	} else if (len == 24 && p[3] == ' ') {
		/* asctime-date: "Sun Nov  6 08:49:37 1994"; the day is
		 * 2DIGIT or SP DIGIT. */
		if (!date_is_wkday(p) || (tm.tm_mon = date_find_month(p + 4)) < 0 || p[7] != ' ')
			return false;
		if (p[8] == ' ') {
			if (!date_num(p + 9, 1, &tm.tm_mday))
				return false;
		} else if (!date_num(p + 8, 2, &tm.tm_mday)) {
			return false;
		}
		if (p[10] != ' ' || !date_time(p + 11, &tm) || p[19] != ' ' ||
		    !date_num(p + 20, 4, &tm.tm_year))
			return false;
	} else {
		/* rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT", with the long
		 * day name; after it come exactly 24 fixed-width bytes. */
		size_t i;
		for (i = 0; i < 7; i++) {
			size_t n = strlen(date_wkday_long[i]);
			if (len == n + 24 && strncasecmp(p, date_wkday_long[i], n) == 0)
				break;
		}
		if (i == 7)
			return false;
		p += len - 24;
		if (p[0] != ',' || p[1] != ' ' || !date_num(p + 2, 2, &tm.tm_mday) || p[4] != '-' ||
		    (tm.tm_mon = date_find_month(p + 5)) < 0 || p[8] != '-' ||
		    !date_num(p + 9, 2, &yy) || p[11] != ' ' || !date_time(p + 12, &tm) ||
		    strncasecmp(p + 20, " GMT", 4) != 0)
			return false;
		tm.tm_year = date_rfc850_year(yy, now);
	}

	if (!date_valid(&tm))
		return false;
	tm.tm_year -= 1900;
	/* timegm() may legitimately return -1 (1969-12-31T23:59:59), and the
	 * fields are already validated, so its result is not checked. A
	 * second of 60 comes out as the next minute, as it should. */
	*out = timegm(&tm);
	return true;
}

bool http_date_parse(struct span s, time_t *out)
{
	return http_date_parse_at(s, time(NULL), out);
}

const char *http_date_now(void)
{
	/* One buffer per thread: no lock, and a caller may keep the pointer
	 * until its own thread next calls this. */
	static _Thread_local char buf[HTTP_DATE_LEN + 1];
	static _Thread_local time_t cached;
	static _Thread_local bool valid;
	time_t now = time(NULL);

	if (!valid || now != cached) {
		http_date_format(now, buf);
		cached = now;
		valid = true;
	}
	return buf;
}
