#!/bin/bash
# usage: run.sh PASS ; runs the matrix once, appending to results.txt
B="$(dirname "$0")"/target/release/enginecmp
for cfg in \
 "redb A" "redb B --no-read" \
 "fjall-tx A" "fjall-tx B --no-read" \
 "fjall-batch A" "fjall-batch B --no-read" \
 "fjall-batch A --fjall-syncdata --no-read" "fjall-batch B --fjall-syncdata --no-read" \
 "fjall-batch A --fjall-kvsep" "fjall-batch B --fjall-kvsep --no-read" \
 "redb A --redb-none-every 4 --no-read" "redb B --redb-none-every 4 --no-read" \
 "redb A --redb-none-every 16 --no-read" "redb B --redb-none-every 16 --no-read" \
 "redb A --redb-2pc --no-read" "redb B --redb-2pc --no-read" \
 "redb A --redb-cache-mb 64 --no-read" \
 ; do
  echo "### pass $1: $cfg  load: $(cut -d' ' -f1-3 /proc/loadavg)"
  $B $cfg 2>&1
done
