# `shardlab train` options out of range (sourced by run_corpus.sh).
section "train options"
bad steps_negative "--steps -5" "$SHARDLAB" train --model tiny --steps -5
bad unknown_preset "huge" "$SHARDLAB" train --model huge --steps 1
