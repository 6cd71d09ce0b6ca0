#!/bin/sh
# make_ewt_train.sh — the bundled training data of data/ud_english_ewt/ from
# the UD English EWT release (CoNLL-U, CC BY-SA 4.0): keeps the columns the
# built-in models read (ID, FORM, UPOS, HEAD, DEPREL), writes '_' in the
# others (LEMMA, XPOS, FEATS, DEPS, MISC) and drops the comment lines;
# sentences and their order are unchanged.
#
#   sh scripts/make_ewt_train.sh EWT_DIR [OUT_DIR]
#
# EWT_DIR holds en_ewt-ud-train.conllu and en_ewt-ud-dev.conllu (release
# 2.16); OUT_DIR defaults to data/ud_english_ewt. Writes
# en_ewt-ud-train.min.conllu and en_ewt-ud-dev.min.conllu.
set -eu
src=${1:?usage: sh scripts/make_ewt_train.sh EWT_DIR [OUT_DIR]}
out=${2:-data/ud_english_ewt}
for split in train dev; do
  in="$src/en_ewt-ud-$split.conllu"
  [ -r "$in" ] || { echo "make_ewt_train.sh: cannot read $in" >&2; exit 1; }
  LC_ALL=C awk -F '\t' 'BEGIN { OFS = "\t" }
    /^#/ { next }
    NF == 10 { print $1, $2, "_", $4, "_", "_", $7, $8, "_", "_"; next }
    { print }' "$in" > "$out/en_ewt-ud-$split.min.conllu.tmp"
  mv "$out/en_ewt-ud-$split.min.conllu.tmp" "$out/en_ewt-ud-$split.min.conllu"
done
