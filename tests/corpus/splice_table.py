"""Replaces the lines between '<!-- NAME:begin -->' and '<!-- NAME:end -->' in a markdown page with
the contents of a file. NAME is 'corpus' unless a third argument gives it: make reliability-table
splices the corpus table, docs/figures.py (make docs-figures) the quoted outputs of other pages.
Writes the page through a temporary file and a rename."""
import os
import sys

page, table = sys.argv[1], sys.argv[2]
name = sys.argv[3] if len(sys.argv) > 3 else "corpus"
begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
text = open(page, encoding="utf-8").read()
if begin not in text or end not in text:
    sys.exit(f"{page}: no {begin} ... {end} markers")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
body = open(table, encoding="utf-8").read().rstrip("\n")
tmp = page + ".tmp"
with open(tmp, "w", encoding="utf-8") as f:
    f.write(f"{head}{begin}\n{body}\n{end}{tail}")
os.replace(tmp, page)
if name == "corpus":
    print(f"{page}: corpus table rewritten ({body.count(chr(10)) - 1} cases)")
else:
    print(f"{page}: {name} rewritten ({body.count(chr(10)) + 1} lines)")
