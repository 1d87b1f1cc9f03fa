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
  bash -c "[ \$('$SHARDLAB' summary '$d' | wc -l) -lt 60 ]"
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

d=$(run_copy step_2_30); sed -i 's/"step":3,/"step":1073741825,/' "$d/rank0.jsonl" "$d/rank1.jsonl"
good summary_step_above_2_30 '^steps 3' "$SHARDLAB" summary "$d"
have_viewer && good viewer_step_above_2_30 'frames at' xvfb-run -a "$viewer" "$d" --frames 3
have_viewer && good viewer_at_step_above_2_30 'frames at' \
  xvfb-run -a "$viewer" "$d" --frames 3 --at-step 1073741825

have_viewer && bad viewer_frames_negative 'frames: Value -1 not in range' --timeout 20 \
  xvfb-run -a "$viewer" "$rd/base" --frames -1
have_viewer && bad viewer_width_zero 'width: Value 0 not in range' --timeout 20 \
  xvfb-run -a "$viewer" "$rd/base" --frames 3 --width 0

# ---- impossible events: refused naming file and line (summary), skipped and named (viewer) ----
# Each was computed on before: results changed with line order, a repeated step halved tokens per
# step, an unknown kind vanished.
# rf_edit DIR PYTHON: runs PYTHON on `lines` (rank0.jsonl's events as dicts), writes them back.
rf_edit() {
  python3 - "$1/rank0.jsonl" "$2" <<'PY'
import json, sys
path, code = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(path) if l.strip()]
exec(code)
open(path, "w").write("".join(json.dumps(l, separators=(",", ":")) + "\n" for l in lines))
PY
}
d=$(run_copy negative_time); rf_edit "$d" 'lines[0]["t"] = -5'
bad summary_negative_time "rank0.jsonl:1: field 't' = -5 is out of range \[0, " "$SHARDLAB" summary "$d"
d=$(run_copy span_backwards)
rf_edit "$d" 's = next(l for l in lines if l["kind"] == "span"); s["t_end"] = s["t_start"] - 1; s["t"] = s["t_end"]'
bad summary_span_ends_before_start "rank0.jsonl:[0-9]+: impossible event \(a span must satisfy t_issue <= t_start <= t_end" \
  "$SHARDLAB" summary "$d"
d=$(run_copy mem_out_of_order)
rf_edit "$d" '
m = [i for i, l in enumerate(lines) if l["kind"] == "mem" and "tier" not in l]
i = next(k for k in range(len(m) - 1) if lines[m[k]]["t"] < lines[m[k + 1]]["t"])
lines[m[i]], lines[m[i + 1]] = lines[m[i + 1]], lines[m[i]]'
bad summary_mem_out_of_order "rank0.jsonl:[0-9]+: impossible event \(t [0-9]+ before the previous memory event's t [0-9]+: lines out of order" \
  "$SHARDLAB" summary "$d"
d=$(run_copy duplicate_step)
rf_edit "$d" 'i = next(i for i, l in enumerate(lines) if l["kind"] == "step" and l["step"] == 2); lines.insert(i + 1, dict(lines[i]))'
bad summary_duplicate_step "rank0.jsonl:[0-9]+: impossible event \(step 2 after step 2" "$SHARDLAB" summary "$d"
d=$(run_copy negative_total)
rf_edit "$d" 'm = next(l for l in lines if l["kind"] == "mem"); m["total"] = -8; m["cat_total"] = -8'
bad summary_negative_memory_total "rank0.jsonl:[0-9]+: impossible event \(negative memory total" "$SHARDLAB" summary "$d"
d=$(run_copy unknown_kind); rf_edit "$d" 'lines.insert(3, {"t": lines[3]["t"], "rank": 0, "kind": "gpu_temp"})'
bad summary_unknown_kind "rank0.jsonl:4: malformed event line \(unknown kind 'gpu_temp'\)" "$SHARDLAB" summary "$d"
have_viewer && good viewer_unknown_kind 'rank0.jsonl:4: skipped malformed line' \
  xvfb-run -a "$viewer" "$d" --frames 3
d=$(run_copy unit_2e9)
rf_edit "$d" 'u = next(l for l in lines if l["kind"] == "unit"); u["unit"] = 2000000000'
bad summary_unit_2e9 "rank0.jsonl:[0-9]+: field 'unit' = 2000000000 is out of range \[-1, 65535\]" \
  "$SHARDLAB" summary "$d"
# The viewer sized its unit strips by the largest unit seen: 2e9 strips, 48 GB.
have_viewer && good viewer_unit_2e9 'rank0.jsonl:[0-9]+: skipped malformed line' \
  xvfb-run -a "$viewer" "$d" --frames 3
d=$(run_copy deep_line)
printf '{"t":1,"rank":0,"kind":"mark","text":%s}\n' "$(python3 -c 'print("[" * 100000 + "]" * 100000)')" >>"$d/rank0.jsonl"
bad summary_line_nested_1e5 'rank0.jsonl:[0-9]+: malformed event line \(arrays and objects nest deeper than 64 levels' \
  "$SHARDLAB" summary "$d"

# A simulated run's meta.json: the ranks it stands for, and the rank it holds, in range.
"$SHARDLAB" simulate --model tiny --steps 3 --batch 8 --seq 32 --ranks 8 --run-dir "$rd/sim" >/dev/null 2>&1
sim_copy() {
  rm -rf "${rd:?}/$1"; cp -r "$rd/sim" "$rd/$1"; rm -f "$rd/$1/summary.json" "$rd/$1/trace.json"
  python3 -c 'import json, sys; p = sys.argv[1] + "/meta.json"; j = json.load(open(p)); exec(sys.argv[2]); json.dump(j, open(p, "w"))' \
    "$rd/$1" "$2"
  printf '%s\n' "$rd/$1"
}
d=$(sim_copy sim_ranks_0 'j["simulated"]["ranks"] = 0')
bad summary_simulated_ranks_0 "meta.json: simulated: field 'ranks' = 0 is out of range \[1, 16777216\]" \
  "$SHARDLAB" summary "$d"
d=$(sim_copy sim_ranks_1e12 'j["simulated"]["ranks"] = 10**12')
bad summary_simulated_ranks_1e12 "meta.json: simulated: field 'ranks' = 1000000000000 is out of range" \
  "$SHARDLAB" summary "$d"
d=$(sim_copy sim_rank_outside 'j["simulated"]["rank"] = 8')
bad summary_simulated_rank_outside "meta.json: simulated: field 'rank' = 8 is out of range \[0, 7\]" \
  "$SHARDLAB" summary "$d"

# ---- the viewer's own options -------------------------------------------------------------------
have_viewer && bad viewer_report_missing_directory 'report .*no/such/dir/r.json: cannot write: the directory .* does not exist' \
  --timeout 30 xvfb-run -a "$viewer" "$rd/base" --screenshot "$rd/r.png" --report "$rd/no/such/dir/r.json"
have_viewer && bad viewer_screenshot_onto_own_meta "meta.json: refusing to write: it is one of this command.s inputs" \
  --timeout 30 xvfb-run -a "$viewer" "$rd/base" --screenshot "$rd/base/meta.json"
have_viewer && bad viewer_at_step_beyond_the_run 'at-step 99: the run has steps 1 to 3' --timeout 30 \
  xvfb-run -a "$viewer" "$rd/base" --frames 3 --at-step 99
have_viewer && good viewer_mark_off_its_panel 'mark 1:memory:5:1000:0: not drawn' \
  xvfb-run -a "$viewer" "$rd/base" --frames 3 --mark 1:memory:5:1000

# flight.json (written by the watchdog, or by the survivors of a killed MPI rank) damaged: the
# summary says how the run ended is unknown and why, and still prints its tables.
d=$(run_copy flight_truncated); printf '{"reason": "x", "ranks": [' >"$d/flight.json"
good summary_flight_json_truncated 'how the run ended: unknown, .*flight.json' \
  "$SHARDLAB" summary "$d"
d=$(run_copy flight_rank_twice)
printf '{"reason": "x", "ranks": [{"rank": 1, "step": 2, "doing": "d"}, {"rank": 1, "step": 2, "doing": "d"}]}' \
  >"$d/flight.json"
good summary_flight_json_rank_twice 'flight.json: ranks\[1\]: rank 1 is listed twice' \
  "$SHARDLAB" summary "$d"
