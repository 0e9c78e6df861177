#!/usr/bin/env bash
# Runs a program under valgrind memcheck for the shell suites (QHX_VALGRIND=DIR, see lib.sh): one
# log per process in DIR, an error or leak turns into exit status 99. No suppressions.
exec valgrind -q --log-file="$QHX_VALGRIND/%p.log" --leak-check=full --show-leak-kinds=definite,indirect,possible \
    --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 --fair-sched=yes "$@"
