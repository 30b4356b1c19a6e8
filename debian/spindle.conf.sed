# server.conf -> /etc/spindle/spindle.conf (debian/rules checks each result)
s|^root = www$|root = /usr/share/spindle/www|
s|^user = off$|user = spindle|
s|^access_log = off$|access_log = /var/log/spindle/access.log|
s|^error_log = -$|error_log = /var/log/spindle/error.log|
