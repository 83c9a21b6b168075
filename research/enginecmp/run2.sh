#!/bin/bash
B="$(dirname "$0")"/target/release/enginecmp
for cfg in \
 "fjall-batch A --fjall-nocomp --no-read" "fjall-batch B --fjall-nocomp --no-read" \
 "fjall-batch A --fjall-kvsep --fjall-nocomp --no-read" "fjall-batch B --fjall-kvsep --fjall-nocomp --no-read" \
 "redb A --per-tenant 256 --no-read" "fjall-batch A --per-tenant 256 --no-read" "fjall-batch A --per-tenant 256 --fjall-kvsep --fjall-nocomp --no-read" \
 "redb B --per-tenant 4 --no-read" "fjall-batch B --per-tenant 4 --no-read" "fjall-batch B --per-tenant 4 --fjall-kvsep --fjall-nocomp --no-read" \
 "redb A --no-read" "fjall-batch A --no-read" "redb B --no-read" "fjall-batch B --no-read" \
 ; do
  echo "### $cfg  load: $(cut -d' ' -f1-3 /proc/loadavg)"
  $B $cfg 2>&1
done
$B fsync
echo "### long fjall-batch B 60s"
$B fjall-batch B --secs 60 --min-events 0 --no-read 2>&1
echo "### long redb B 60s"
$B redb B --secs 60 --min-events 0 --no-read 2>&1
