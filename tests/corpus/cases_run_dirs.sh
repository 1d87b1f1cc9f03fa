section "run directories"
# Hostile run directories for `shardlab summary` and the viewer (sourced by run_corpus.sh): one
# tiny real run, then damaged copies of it. The viewer is a live tool that shows problems rather
# than exiting on them, so its cases are `good` ones: it renders and names the problem, where it
# used to abort (an ImGui assertion), hang or throw a bare std::bad_alloc.
rd=$WORK/rundirs
mkdir -p "$rd"
"$SHARDLAB" train --model tiny --steps 3 --ranks 2 --run-dir "$rd/base" >"$rd/base.log" 2>&1
viewer=$BIN/shardlab-viewer
# Viewer cases run where the viewer is built (the sanitizer presets leave it out) and xvfb-run can
# give it a display.
have_viewer() { [ -x "$viewer" ] && command -v xvfb-run >/dev/null 2>&1; }

# run_copy NAME: a fresh copy of the base run, without summary.json (so reads are not cached).
run_copy() {
  rm -rf "${rd:?}/$1"
  cp -r "$rd/base" "$rd/$1"
  rm -f "$rd/$1/summary.json" "$rd/$1/trace.json"
  printf '%s\n' "$rd/$1"
}
set_world() { sed -i "s/\"world_size\": *[0-9]*/\"world_size\": $2/" "$1/meta.json"; }

d=$(run_copy world_2e9); set_world "$d" 2000000000
bad summary_world_size_2e9 "meta.json: field 'world_size' = 2000000000 is out of range" \
  "$SHARDLAB" summary "$d"
have_viewer && good viewer_world_size_2e9 "field 'world_size' = 2000000000 is out of range" \
  xvfb-run -a "$viewer" "$d" --frames 3

d=$(run_copy world_5); set_world "$d" 5
bad summary_world_size_above_files "world_size 5, but the directory holds 2 non-empty rank files" \
  "$SHARDLAB" summary "$d"

d=$(run_copy empty_rank999999); : >"$d/rank999999.jsonl"
good summary_empty_rank999999 '^rank +compute ms' "$SHARDLAB" summary "$d"
expect summary_empty_rank999999_two_rows \
  bash -c "[ \$('$SHARDLAB' summary '$d' | wc -l) -lt 40 ]"
have_viewer && good viewer_empty_rank999999 'frames at' \
  xvfb-run -a "$viewer" "$d" --screenshot "$rd/empty999999.png"
have_viewer && expect viewer_empty_rank999999_two_ranks grep -q '"ranks": 2' "$rd/empty999999.json"

d=$(run_copy stray_rank999999)
sed -n '1s/"rank":0/"rank":999999/p' "$d/rank0.jsonl" >"$d/rank999999.jsonl"
bad summary_stray_rank999999 "rank999999.jsonl: rank 999999 is outside meta.json's world_size 2" \
  "$SHARDLAB" summary "$d"
have_viewer && good viewer_stray_rank999999 'rank999999.jsonl: rank 999999 is beyond' \
  xvfb-run -a "$viewer" "$d" --frames 3

d=$(run_copy meta_is_dir); rm "$d/meta.json"; mkdir "$d/meta.json"
bad summary_meta_json_is_a_directory 'meta_is_dir/meta.json: is a directory' \
  "$SHARDLAB" summary "$d"

d=$(run_copy rank_is_dir); rm "$d/rank1.jsonl"; mkdir "$d/rank1.jsonl"
bad summary_rank_file_is_a_directory 'rank_is_dir/rank1.jsonl: is not a regular file' \
  "$SHARDLAB" summary "$d"

d=$(run_copy fractional_step); sed -i 's/"step":2,/"step":2.5,/' "$d/rank0.jsonl"
bad summary_fractional_step "rank0.jsonl:[0-9]+: field 'step' must be an integer, not 2.5" \
  "$SHARDLAB" summary "$d"

d=$(run_copy huge_bytes); sed -i '0,/"bytes":[0-9]*/s//"bytes":1e30/' "$d/rank1.jsonl"
bad summary_bytes_1e30 "rank1.jsonl:[0-9]+: field 'bytes' must be an integer, not 1e\+?30" \
  "$SHARDLAB" summary "$d"

d=$(run_copy int64_bytes); sed -i '0,/"bytes":[0-9]*/s//"bytes":9223372036854775807/' "$d/rank1.jsonl"
bad summary_bytes_int64_max "rank1.jsonl:[0-9]+: field 'bytes' = 9223372036854775807 is out of range" \
  "$SHARDLAB" summary "$d"

d=$(run_copy step_2_30); sed -i 's/"step":2,/"step":1073741825,/' "$d/rank0.jsonl" "$d/rank1.jsonl"
good summary_step_above_2_30 '^steps 3' "$SHARDLAB" summary "$d"
have_viewer && good viewer_step_above_2_30 'frames at' xvfb-run -a "$viewer" "$d" --frames 3
have_viewer && good viewer_at_step_above_2_30 'frames at' \
  xvfb-run -a "$viewer" "$d" --frames 3 --at-step 1073741825

have_viewer && bad viewer_frames_negative 'frames: Value -1 not in range' --timeout 20 \
  xvfb-run -a "$viewer" "$rd/base" --frames -1
have_viewer && bad viewer_width_zero 'width: Value 0 not in range' --timeout 20 \
  xvfb-run -a "$viewer" "$rd/base" --frames 3 --width 0
