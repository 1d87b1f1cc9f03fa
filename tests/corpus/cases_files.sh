section "outputs and inputs"
# Where ShardLab writes and what it reads (sourced by run_corpus.sh; core/base/file_io.hpp). A
# destination that exists and is not a regular file is refused and left as it was: the writers
# used to rename a regular file over it (as root, `shardlab export CKPT /dev/null` replaced the
# device node). No output lands on an input of the same command. An input that is not a regular
# file (a FIFO) is refused at once: open() used to block for ever. Every hostile path is made
# here, in the scratch directory; a link to /dev/null stands for a device.
fs=$WORK/files
mkdir -p "$fs"
"$SHARDLAB" train --model tiny --steps 2 --save-every 2 --ckpt-dir "$fs/ck" --trace off >/dev/null 2>&1
mkfifo "$fs/fifo"
ln -s /dev/null "$fs/null"
still_fifo() { [ -p "$fs/fifo" ]; }
still_null() { [ -L "$fs/null" ] && [ "$(readlink "$fs/null")" = /dev/null ] && [ -c /dev/null ]; }

bad export_onto_fifo 'fifo: refusing to write: exists and is a FIFO' --timeout 20 \
  "$SHARDLAB" export "$fs/ck" "$fs/fifo"
expect export_onto_fifo_left_alone still_fifo
bad export_onto_link_to_dev_null 'null: refusing to write: a symbolic link to a character device' \
  --timeout 20 "$SHARDLAB" export "$fs/ck" "$fs/null"
expect export_onto_link_left_alone still_null
bad export_onto_directory 'refusing to write: exists and is a directory' --timeout 20 \
  "$SHARDLAB" export "$fs/ck" "$fs/ck"
cp "$fs/ck/step-2/index.json" "$fs/index.before"
bad export_onto_own_index 'index.json: refusing to write: it is one of this command.s inputs' \
  --timeout 20 "$SHARDLAB" export "$fs/ck" "$fs/ck/step-2/index.json"
expect export_own_index_unchanged cmp -s "$fs/index.before" "$fs/ck/step-2/index.json"
bad export_onto_own_latest 'latest: refusing to write: it is one of this command.s inputs' \
  --timeout 20 "$SHARDLAB" export "$fs/ck" "$fs/ck/latest"
bad export_into_missing_directory 'the directory .*/no/such/dir does not exist' --timeout 20 \
  "$SHARDLAB" export "$fs/ck" "$fs/no/such/dir/m.safetensors"

# calibrate --out is checked before minutes of measuring, not after.
bad calibrate_out_fifo 'out .*fifo: refusing to write: exists and is a FIFO' --timeout 20 \
  "$SHARDLAB" calibrate --out "$fs/fifo"
bad calibrate_out_link_to_dev_null 'refusing to write: a symbolic link to a character device' \
  --timeout 20 "$SHARDLAB" calibrate --out "$fs/null"
expect calibrate_out_left_alone still_null

printf 'some text\n' > "$fs/text.txt"
bad data_encode_onto_its_input 'text.txt: refusing to write: it is one of this command.s inputs' \
  --timeout 20 "$SHARDLAB" data encode "$fs/text.txt" "$fs/text.txt"
expect data_encode_input_unchanged grep -qx 'some text' "$fs/text.txt"

# A checkpoint root whose `latest` is a FIFO: reading it blocked the save's repair for ever, and the
# save then renamed its own file over it.
mkdir -p "$fs/ck_fifo_latest"
mkfifo "$fs/ck_fifo_latest/latest"
bad save_latest_fifo 'latest: refusing to write: exists and is a FIFO' --timeout 60 \
  "$SHARDLAB" train --model tiny --steps 1 --save-every 1 --ckpt-dir "$fs/ck_fifo_latest" --trace off
expect save_latest_fifo_left_alone test -p "$fs/ck_fifo_latest/latest"
mkdir -p "$fs/ck_step_file"
printf 'not a checkpoint\n' > "$fs/ck_step_file/step-1"
bad save_step_is_a_file 'step-1: exists and is a regular file, not a checkpoint directory' \
  --timeout 60 "$SHARDLAB" train --model tiny --steps 1 --save-every 1 --ckpt-dir "$fs/ck_step_file" --trace off

# Inputs that are FIFOs: each blocked in open() for ever.
bad cluster_file_fifo 'fifo: cannot open for reading: is a FIFO' --timeout 20 \
  "$SHARDLAB" simulate --cluster "$fs/fifo" --model tiny --ranks 2
bad init_from_fifo 'fifo: cannot open for reading: is a FIFO' --timeout 20 \
  "$SHARDLAB" train --model tiny --steps 1 --init-from "$fs/fifo" --trace off
bad data_fifo 'fifo: cannot open for reading: is a FIFO' --timeout 20 \
  "$SHARDLAB" train --model tiny --steps 1 --data "$fs/fifo" --trace off
for f in index.json shard-0.bin; do
  rm -rf "$fs/ck_$f"; cp -r "$fs/ck" "$fs/ck_$f"
  rm "$fs/ck_$f/step-2/$f"; mkfifo "$fs/ck_$f/step-2/$f"
done
bad checkpoint_index_fifo 'index.json: cannot open for reading: is a FIFO' --timeout 20 \
  "$SHARDLAB" inspect "$fs/ck_index.json"
bad checkpoint_shard_fifo 'shard-0.bin: cannot open for reading: is a FIFO' --timeout 20 \
  "$SHARDLAB" inspect "$fs/ck_shard-0.bin"
bad resume_shard_fifo 'shard-0.bin: cannot open for reading: is a FIFO' --timeout 60 \
  "$SHARDLAB" train --model tiny --steps 3 --resume "$fs/ck_shard-0.bin" --trace off
