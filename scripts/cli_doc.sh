#!/usr/bin/env bash
# Writes the CLI reference (docs/cli.md) from the commands' own --help, so the two cannot drift;
# tests/cli_test.sh fails when docs/cli.md is not what this prints.
set -eu
qhx=${1:-build/qhx}
cat <<'HEAD'
# qhx command-line reference

Generated from `qhx COMMAND --help` by `scripts/cli_doc.sh` (the tests check it is current).
Exit status: 0 success, 1 a failure (a one-line `qhx COMMAND: reason` on stderr), 2 a usage error.
Every command that reads a model takes a bundle directory (or its `manifest.json`), a Hugging Face
checkpoint directory or a GGUF file of llama.cpp's `qwen35` architecture.

HEAD
echo '```'
"$qhx" --help
echo '```'
for c in $("$qhx" --help | awk '/^commands:/{on=1; next} /^[^ ]/{on=0} on && NF {print $1}'); do
    printf '\n## qhx %s\n\n```\n' "$c"
    "$qhx" "$c" --help
    echo '```'
done
printf '\n## qhx_generate\n\n```\n'
"$(dirname "$qhx")/qhx_generate" --help
echo '```'
