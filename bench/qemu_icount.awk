# Instructions a qemu-user run executed, from its log (-d in_asm,exec,nochain): each translation
# block's instruction count from its IN: listing, summed over the Trace lines that ran it.
/^IN:/ { inblk = 1; first = ""; n = 0; next }
inblk && /^0x[0-9a-f]+:/ { if (first == "") first = substr($1, 3, length($1) - 3); n++; next }
inblk && !/^0x/ { if (first != "") { sub(/^0+/, "", first); cnt[first] = n }; inblk = 0 }
/^Trace/ { split($4, f, "/"); pc = f[2]; sub(/^0+/, "", pc); total += cnt[pc]; if (!(pc in cnt)) miss++ }
END { printf "%d %d\n", total, miss }
