section "checkpoints"
# Damaged checkpoints and leftovers of killed saves (sourced by run_corpus.sh). One 2-step run
# makes a checkpoint; every case damages its own copy.
ck_base=$WORK/ck_base
"$SHARDLAB" train --model tiny --steps 2 --save-every 2 --ckpt-dir "$ck_base" --trace off >/dev/null 2>&1
# ck_copy NAME: a fresh copy of the checkpoint root at $WORK/NAME.
ck_copy() { rm -rf "${WORK:?}/$1"; cp -r "$ck_base" "$WORK/$1"; }
# ck_edit FILE PYTHON: runs PYTHON on the JSON object j of FILE, writes it back.
ck_edit() {
  python3 - "$1" "$2" <<'PY'
import json, sys
path, code = sys.argv[1], sys.argv[2]
j = json.load(open(path))
exec(code)
open(path, "w").write(json.dumps(j))
PY
}
# ck_reseal FILE: gives an edited index.json the checksum of its new content (index_crc32c: the
# CRC-32C of the compact JSON, keys sorted, of every other field), as a deliberate forger would, so
# that the checks behind the checksum are reached.
ck_reseal() {
  python3 - "$1" <<'PY'
import json, sys
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF
path = sys.argv[1]
j = json.load(open(path))
j.pop("index_crc32c", None)
text = json.dumps(j, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
j["index_crc32c"] = "%08x" % crc32c(text.encode())
open(path, "w").write(json.dumps(j))
PY
}

ck_copy latest_garbage
python3 -c 'import sys; open(sys.argv[1], "wb").write(bytes((i * 97 + 13) % 256 for i in range(300)))' \
  "$WORK/latest_garbage/latest"
bad latest_garbage_inspect 'latest: not a valid step name \(300 bytes starting' \
  "$SHARDLAB" inspect "$WORK/latest_garbage"
bad latest_garbage_resume 'latest: not a valid step name' \
  "$SHARDLAB" train --model tiny --steps 4 --ckpt-dir "$WORK/latest_garbage" --resume latest --trace off

ck_copy step_negative
ck_edit "$WORK/step_negative/step-2/index.json" 'j["step"] = -7'
bad index_step_negative "index.json: field 'step' = -7 is out of range" \
  "$SHARDLAB" train --model tiny --steps 4 --resume "$WORK/step_negative/step-2" --trace off

ck_copy states_empty
ck_edit "$WORK/states_empty/step-2/index.json" 'j["states"] = []'
printf 'XXXX' | dd of="$WORK/states_empty/step-2/shard-0.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
bad index_states_empty "index.json: field 'states' must be a non-empty array" \
  "$SHARDLAB" inspect "$WORK/states_empty"

ck_copy count_huge
ck_edit "$WORK/count_huge/step-2/index.json" '
t = j["tensors"][0]
t["shape"] = [2**31, 2**31]; t["numel"] = 2**62
for s in t["states"]:
    t["states"][s] = [{"file": "shard-0.bin", "begin": 0, "count": 2**62, "offset": 0, "crc32c": "00000000"}]'
bad index_count_2e62_inspect 'index.json: tensor wte.weight state .*: chunk at byte 0 with 4611686018427387904 elements lies outside shard-0.bin' \
  "$SHARDLAB" inspect "$WORK/count_huge"
bad index_count_2e62_export 'index.json: tensor wte.weight state .*lies outside shard-0.bin' \
  "$SHARDLAB" export "$WORK/count_huge" "$WORK/count_huge.safetensors"

ck_copy count_fraction
ck_edit "$WORK/count_fraction/step-2/index.json" 'j["tensors"][0]["states"]["params"][0]["count"] += 0.5'
bad index_count_fractional "index.json: tensor wte.weight state params chunk 0: field 'count' must be an integer" \
  "$SHARDLAB" inspect "$WORK/count_fraction"

ck_copy uncovered
printf 'unverified bytes' >> "$WORK/uncovered/step-2/shard-0.bin"
ck_edit "$WORK/uncovered/step-2/index.json" 'j["files"][0]["bytes"] += 16'
bad shard_bytes_without_checksum "index.json: file shard-0.bin: bytes \[[0-9]+, [0-9]+\) are covered by no chunk's checksum" \
  "$SHARDLAB" inspect "$WORK/uncovered"

ck_copy dup_key
sed -i '0,/{/s//{"step": 9, /' "$WORK/dup_key/step-2/index.json"
bad index_duplicate_key "index.json: key 'step' appears twice" \
  "$SHARDLAB" inspect "$WORK/dup_key"

# safetensors headers: a repeated tensor name, a fractional offset.
"$SHARDLAB" export "$ck_base" "$WORK/model.safetensors" >/dev/null 2>&1
st_edit() {
  python3 - "$WORK/model.safetensors" "$WORK/$1" "$2" <<'PY'
import struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = raw[8:8 + n].decode().rstrip(" ")
head = eval(sys.argv[3])
open(sys.argv[2], "wb").write(struct.pack("<Q", len(head)) + head.encode() + raw[8 + n:])
PY
}
st_edit st_dup.safetensors 'head[:-1] + ", \"ln_f.bias\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}"'
bad safetensors_duplicate_key "st_dup.safetensors: header: key 'ln_f.bias' appears twice" \
  "$SHARDLAB" train --model tiny --steps 1 --init-from "$WORK/st_dup.safetensors" --trace off
st_edit st_frac.safetensors 'head.replace("\"data_offsets\":[0,", "\"data_offsets\":[0.5,", 1)'
bad safetensors_fractional_offset "st_frac.safetensors: tensor .*: field 'data_offsets\[0\]' must be an integer, not 0.5" \
  "$SHARDLAB" train --model tiny --steps 1 --init-from "$WORK/st_frac.safetensors" --trace off

# A save of step 2 killed between moving the old copy aside and renaming the new one in (the
# fallback without an atomic swap): `latest` names step-2, complete copies sit beside it.
ck_copy window
mv "$WORK/window/step-2" "$WORK/window/step-2.old-999999999"
cp -r "$WORK/window/step-2.old-999999999" "$WORK/window/step-2.tmp-999999999"
printf 'step-2.tmp-999999999' > "$WORK/window/step-2.pending"
good resave_window_inspect 'leftover +step-2\.tmp-999999999: a complete copy of step 2 under a temporary name' \
  "$SHARDLAB" inspect "$WORK/window"
good resave_window_resume 'note: .*latest names step-2, which is missing; using step-2\.old-999999999' \
  "$SHARDLAB" train --model tiny --steps 4 --save-every 2 --ckpt-dir "$WORK/window" --resume latest --trace off
expect resave_window_repaired test -f "$WORK/window/step-2/index.json" -a ! -e "$WORK/window/step-2.old-999999999" \
  -a ! -e "$WORK/window/step-2.tmp-999999999" -a ! -e "$WORK/window/step-2.pending"

# A killed save's temp dir and note (its pid no longer runs) go with the next save.
ck_copy stale
mkdir -p "$WORK/stale/step-3.tmp-999999999"
printf 'step-3.tmp-999999999' > "$WORK/stale/step-3.pending"
good stale_leftovers_resume 'resumed from' \
  "$SHARDLAB" train --model tiny --steps 4 --save-every 2 --ckpt-dir "$WORK/stale" --resume latest --trace off
expect stale_leftovers_removed test ! -e "$WORK/stale/step-3.tmp-999999999" -a ! -e "$WORK/stale/step-3.pending"

# The loader position is an int64 the trainer seeks to: 2^64 - 1 is not one.
ck_copy position_huge
ck_edit "$WORK/position_huge/step-2/index.json" 'j["loader"]["position"] = 2**64 - 1'
ck_reseal "$WORK/position_huge/step-2/index.json"
bad loader_position_out_of_range "index.json: loader: field 'position' = 18446744073709551615 is out of range" \
  "$SHARDLAB" train --model tiny --steps 4 --resume "$WORK/position_huge/step-2" --trace off

# The index's own checksum (index_crc32c): a value edited within its range passed every check,
# so `inspect` said "checksums ok" and a resume started "at step 3" (never trained), or moved the
# optimizer's step or the loader's position. A reformatted index still reads (the checksum is of
# the content, keys sorted, not of the layout).
ck_copy step_edited
ck_edit "$WORK/step_edited/step-2/index.json" 'j["step"] = 3'
bad index_step_edited_inspect "index.json: the index's checksum index_crc32c is [0-9a-f]+ but its content gives [0-9a-f]+" \
  "$SHARDLAB" inspect "$WORK/step_edited"
bad index_step_edited_resume "index.json: the index's checksum" \
  "$SHARDLAB" train --model tiny --steps 4 --resume "$WORK/step_edited/step-2" --trace off
ck_copy optimizer_step_edited
ck_edit "$WORK/optimizer_step_edited/step-2/index.json" 'j["optimizer_step"] = 1'
bad index_optimizer_step_edited "index.json: the index's checksum" \
  "$SHARDLAB" train --model tiny --steps 4 --resume "$WORK/optimizer_step_edited/step-2" --trace off
ck_copy position_edited
ck_edit "$WORK/position_edited/step-2/index.json" 'j["loader"]["position"] += 64'
bad index_loader_position_edited "index.json: the index's checksum" \
  "$SHARDLAB" train --model tiny --steps 4 --resume "$WORK/position_edited/step-2" --trace off
ck_copy reformatted
ck_edit "$WORK/reformatted/step-2/index.json" 'pass'
good index_reformatted_still_reads 'checksums +ok' "$SHARDLAB" inspect "$WORK/reformatted"

# 10^5 levels of nesting in an index and in a safetensors header: a stack overflow before.
ck_copy deep_index
python3 -c 'import sys; p = sys.argv[1]; t = open(p).read(); open(p, "w").write(t.replace("{", "{\"deep\": " + "[" * 100000 + "]" * 100000 + ", ", 1))' \
  "$WORK/deep_index/step-2/index.json"
bad index_nested_1e5 'index.json: arrays and objects nest deeper than 64 levels' \
  "$SHARDLAB" inspect "$WORK/deep_index"
st_edit st_deep.safetensors 'head.replace("{", "{\"deep\": " + "[" * 100000 + "]" * 100000 + ", ", 1)'
bad safetensors_header_nested_1e5 'st_deep.safetensors: header: arrays and objects nest deeper than 64 levels' \
  "$SHARDLAB" train --model tiny --steps 1 --init-from "$WORK/st_deep.safetensors" --trace off
