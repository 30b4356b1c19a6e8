# conf-keys.awk - the key reference of spindle.conf(5), generated from
# server.conf, so the man page says what the sample file says.
#
# server.conf's shape: "[section]" lines; a block of "# ..." comment lines
# describes the "key = default" lines right after it (several keys may share
# one block); a blank line ends a block. A comment line indented by two or
# more spaces after its "#" is an example, kept line for line (a literal
# block); the others are prose, joined into paragraphs. A block with no key
# after it (listen, [cache_control]) is printed as it is. Comments before the
# first section are the file's own preamble and are left out. Output: scdoc,
# one subsection per section, "*key* = _default_" then the indented
# description.
#
# Usage: awk -f conf-keys.awk server.conf > keys.scd

# scdoc's escapes: a backslash stays a backslash only doubled, and * and _
# would start bold and underline. (A loop, not gsub: awks differ in what a
# backslash means in gsub's replacement.)
function esc(s,    out, i, c) {
	out = ""
	for (i = 1; i <= length(s); i++) {
		c = substr(s, i, 1)
		if (c == "\\" || c == "*" || c == "_")
			out = out "\\"
		out = out c
	}
	return out
}

# The description so far: nparts parts, each prose (a paragraph) or an
# example (a literal block of lines).
function add_prose(line) {
	if (nparts == 0 || kind[nparts] != "prose") {
		kind[++nparts] = "prose"
		part[nparts] = line
	} else {
		part[nparts] = part[nparts] " " line
	}
}

function add_example(line) {
	if (nparts == 0 || kind[nparts] != "example") {
		kind[++nparts] = "example"
		part[nparts] = line
	} else {
		part[nparts] = part[nparts] "\n" line
	}
}

# Prints the description, each line after `indent`.
function print_text(indent,    i, n, j, lines) {
	for (i = 1; i <= nparts; i++) {
		if (i > 1)
			print ""
		if (kind[i] == "prose") {
			printf "%s%s\n", indent, part[i]
		} else {
			# scdoc keeps a literal block's lines as they are: unescaped
			printf "%s```\n", indent
			n = split(part[i], lines, "\n")
			for (j = 1; j <= n; j++)
				printf "%s%s\n", indent, lines[j]
			printf "%s```\n", indent
		}
	}
}

function flush_keys() {
	if (nkeys == 0 && nparts > 0) {         # a block about keys with no default line
		print_text("")
		print ""
	} else if (nkeys > 0) {
		for (i = 1; i <= nkeys; i++)
			printf "%s%s\n", keys[i], (i < nkeys ? "++" : "")
		print_text("\t")
		print ""
	}
	nkeys = 0
	nparts = 0
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
	sub(/^[ \t]*#/, "", line)
	if (line ~ /^   /) {          # "#" and two spaces or more: an example
		sub(/^   /, "", line)
		add_example(line)
	} else {
		sub(/^[ \t]/, "", line)
		add_prose(esc(line))
	}
	next
}

/^[ \t]*$/ {
	flush_keys()
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
