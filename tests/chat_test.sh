#!/usr/bin/env bash
# qhx chat as a person uses it, through a pseudo-terminal (build/pty_drive): multi-turn replies,
# the oldest turns dropped (with a note) when the context fills, /reset, Ctrl-C stopping a reply
# without leaving, Ctrl-C at the prompt, /exit; and the same chat driven through a pipe.
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
P='\x1b[1m>\x1b[0m '   # the prompt on a terminal

cat >"$tmp/turns" <<S
expect $P
send Who made the heaven and the earth?\n
expect $P
send What did Moses say unto the children of Israel in the wilderness of Sinai?\n
expect $P
send And who was the king of Babylon in those days, and what did he do to Jerusalem?\n
expect [context full: dropped the
expect $P
send /reset\n
expect (conversation reset)
expect $P
send \x03
expect (Ctrl-C stops a reply; /exit or Ctrl-D leaves)
expect $P
send /exit\n
exit 0
S
"$build/pty_drive" "$tmp/turns" "$qhx" chat models/q35-kjv --system "Answer from the scriptures." --ctx 160 -n 40 --seed 1 --no-think >"$tmp/t1" 2>&1 \
    && ok || bad "multi-turn chat on a terminal: $(tail -c 600 "$tmp/t1")"
replies=$(grep -c $'\x1b\[1m>' "$tmp/t1")
[[ $replies -ge 5 ]] && ok || bad "expected at least 5 prompts, saw $replies"

# a reply of up to 100,000 tokens, stopped by Ctrl-C; the chat goes on
cat >"$tmp/cancel" <<S
expect $P
send In the beginning\n
sleep 1500
send \x03
expect [stopped]
expect $P
send /exit\n
exit 0
S
"$build/pty_drive" "$tmp/cancel" "$qhx" chat models/q35-kjv -n 100000 --ignore-eos --seed 2 --no-think >"$tmp/t2" 2>&1 \
    && ok || bad "Ctrl-C during a reply: $(tail -c 600 "$tmp/t2")"

# through a pipe: no terminal codes, one prompt per line read, clean exit at end of input
printf 'Who made the heaven?\n/reset\nAnd the earth?\n' | "$qhx" chat models/q35-kjv -n 24 --seed 3 >"$tmp/p" 2>"$tmp/perr"; rc=$?
[[ $rc -eq 0 && $(grep -c '^> ' "$tmp/p") -eq 4 && $(grep -c '(conversation reset)' "$tmp/p") -eq 1 ]] && ! grep -q $'\x1b' "$tmp/p" \
    && ok || bad "piped chat: exit $rc, $(cat "$tmp/p" "$tmp/perr")"
# the same seed gives the same conversation
printf 'Who made the heaven?\n/reset\nAnd the earth?\n' | "$qhx" chat models/q35-kjv -n 24 --seed 3 >"$tmp/p2" 2>/dev/null
cmp -s "$tmp/p" "$tmp/p2" && ok || bad "same seed, different chat"
printf '\xff\xfe\n/exit\n' | "$qhx" chat models/q35-kjv -n 8 >"$tmp/p3" 2>&1 && grep -q "not valid UTF-8" "$tmp/p3" && ok || bad "invalid UTF-8 line: $(cat "$tmp/p3")"
"$qhx" chat models/q35-kjv -n 300000 </dev/null >/dev/null 2>"$tmp/err"; rc=$?
[[ $rc -eq 1 ]] && grep -q "leaves no room" "$tmp/err" && ok || bad "-n over the context: exit $rc $(cat "$tmp/err")"

# the template drops earlier turns' reasoning (--think): after each reply the session is cached as the
# next rendering will hold it, so each turn resumes past the whole previous prompt, at its own message,
# and says the same as a chat that evaluates every rendering afresh
turns='Who made the heaven?\nAnd the earth?\nAnd the waters?\n'
printf "$turns" | "$qhx" chat models/q35-kjv -n 24 --seed 3 --think --verbose --system "Answer from the scriptures." >"$tmp/r1" 2>"$tmp/r1e"
printf "$turns" | "$qhx" chat models/q35-kjv -n 24 --seed 3 --think --verbose --cache-mb 0 --system "Answer from the scriptures." >"$tmp/r2" 2>"$tmp/r2e"
cmp -s "$tmp/r1" "$tmp/r2" && ok || bad "resumed chat differs from the uncached one: $(cat "$tmp/r1") vs $(cat "$tmp/r2")"
mapfile -t res < <(sed -nE 's/^\[prompt ([0-9]+) tokens, ([0-9]+) resumed.*/\1 \2/p' "$tmp/r1e")
read -r n1 r1 <<<"${res[0]:-0 0}"; read -r n2 r2 <<<"${res[1]:-0 0}"; read -r n3 r3 <<<"${res[2]:-0 0}"
(( ${#res[@]} == 3 && r1 == 0 && r2 >= n1 && r2 < n2 && r3 >= n2 && r3 < n3 )) && ok || bad "resumed tokens per turn: $(cat "$tmp/r1e")"
[[ $(grep -c ', 0 resumed' "$tmp/r2e") -eq 3 ]] && ok || bad "--cache-mb 0 resumed: $(cat "$tmp/r2e")"

# --cache-dir: the same chat run again resumes its first turn from the files the first run wrote,
# and says what the uncached chat says
for k in 3 4; do
    printf "$turns" | "$qhx" chat models/q35-kjv -n 24 --seed 3 --think --verbose --cache-dir "$tmp/pcdir" \
        --system "Answer from the scriptures." >"$tmp/r$k" 2>"$tmp/r${k}e"
done
cmp -s "$tmp/r4" "$tmp/r2" && ok || bad "chat resumed from --cache-dir differs from the uncached one: $(cat "$tmp/r4")"
mapfile -t res < <(sed -nE 's/^\[prompt ([0-9]+) tokens, ([0-9]+) resumed.*/\2/p' "$tmp/r3e" "$tmp/r4e")
(( ${#res[@]} == 6 && res[0] == 0 && res[3] > 0 )) && ok || bad "--cache-dir: resumed tokens per turn, two runs: ${res[*]}"

# line editing on a terminal (libedit): arrow keys move in the line and never reach the model (the
# edited line gives the reply and prompt length the plainly typed one gives); up recalls the last
# line; a line ending in \ goes on on the next; /help lists the commands
cat >"$tmp/plain" <<S
expect $P
send Who made the heaven?\n
expect $P
send /exit\n
exit 0
S
cat >"$tmp/edited" <<S
expect $P
send Who made heaven?\x1b[D\x1b[D\x1b[D\x1b[D\x1b[D\x1b[D\x1b[Dthe \x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\n
expect $P
send /help\n
expect /reset  start
expect $P
send \x1b[A\n
expect /reset  start
expect $P
send And the \\\n
send earth?\n
expect $P
send /exit\n
exit 0
S
"$build/pty_drive" "$tmp/plain" "$qhx" chat models/q35-kjv -n 24 --seed 5 --temp 0 --no-think --verbose >"$tmp/e1" 2>&1 &&
"$build/pty_drive" "$tmp/edited" "$qhx" chat models/q35-kjv -n 24 --seed 5 --temp 0 --no-think --verbose >"$tmp/e2" 2>&1 \
    && ok || bad "line editing on a terminal: $(tail -c 600 "$tmp/e2")"
p1=$(grep -o '\[prompt [0-9]* tokens' "$tmp/e1" | head -1); p2=$(grep -o '\[prompt [0-9]* tokens' "$tmp/e2" | head -1)
[[ -n $p1 && $p1 == "$p2" ]] && ok || bad "an edited line is not the typed one: '$p1' / '$p2'"
[[ $(grep -c '/reset  start' "$tmp/e2") -ge 2 && $(grep -c '\[prompt' "$tmp/e2") -eq 2 ]] && ok || bad "history recall or a continued line: $(tail -c 800 "$tmp/e2")"
printf 'And the \\\nearth?\n/help\n' | "$qhx" chat models/q35-kjv -n 8 --seed 3 >"$tmp/p4" 2>&1
[[ $(grep -c '^> ' "$tmp/p4") -eq 3 && $(grep -c '^> \. ' "$tmp/p4") -eq 1 ]] && grep -q '/exit   leave' "$tmp/p4" && ok || bad "piped continued line and /help: $(cat "$tmp/p4")"

finish chat
