# conf-keys.awk - the key reference of spindle.conf(5), generated from
# server.conf, so the man page says what the sample file says.
#
# server.conf's shape: "[section]" lines; a block of "# ..." comment lines
# describes the "key = default" lines right after it (several keys may share
# one block); a blank line ends a block. Comments before the first section
# are the file's own preamble and are left out. Output: scdoc, one
# subsection per section, "*key* = _default_" then the indented description.
#
# Usage: awk -f conf-keys.awk server.conf > keys.scd

function esc(s) {
	gsub(/\\/, "\\\\", s)
	gsub(/\*/, "\\*", s)
	gsub(/_/, "\\_", s)
	return s
}

function flush_keys() {
	if (nkeys == 0)
		return
	for (i = 1; i <= nkeys; i++)
		printf "%s%s\n", keys[i], (i < nkeys ? "++" : "")
	if (text != "")
		printf "\t%s\n", text
	print ""
	nkeys = 0
	text = ""
}

/^\[[a-z_]+\][ \t]*$/ {
	flush_keys()
	section = $0
	gsub(/[ \t]/, "", section)
	printf "## %s\n\n", section
	next
}

section == "" { next }

/^[ \t]*#/ {
	if (nkeys > 0)      # a new comment after keys starts the next block
		flush_keys()
	line = $0
	sub(/^[ \t]*#[ \t]?/, "", line)
	text = text (text == "" ? "" : " ") esc(line)
	next
}

/^[ \t]*$/ {
	flush_keys()
	text = ""
	next
}

/=/ {
	key = $0
	sub(/[ \t]*=.*/, "", key)
	sub(/^[ \t]*/, "", key)
	value = $0
	sub(/^[^=]*=[ \t]*/, "", value)
	sub(/[ \t]+$/, "", value)
	keys[++nkeys] = "*" esc(key) "* = " (value == "" ? "(empty)" : "_" esc(value) "_")
	next
}

{
	printf "conf-keys.awk: %s:%d: neither a section, a comment nor a key: %s\n", FILENAME, FNR, $0 > "/dev/stderr"
	bad = 1
}

END {
	flush_keys()
	exit bad
}
