# Sourced by the lab scripts (lab/stats.sh sources it): where a long
# script is. progress TEXT shows "TEXT, 42 s" on one line of standard
# error, rewritten in place, when standard error is a terminal (and TERM
# is set and not "dumb", as rxevm sets it when it captures a VM's
# output), and nothing when it is captured; progress_done clears the line.
progress() { if [ -t 2 ] && [ "${TERM:-dumb}" != dumb ]; then printf '\r\033[K%s, %d s' "$*" "$SECONDS" >&2; fi; }
progress_done() { if [ -t 2 ] && [ "${TERM:-dumb}" != dumb ]; then printf '\r\033[K' >&2; fi; }
