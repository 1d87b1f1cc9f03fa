"""Replaces the lines between '<!-- corpus:begin -->' and '<!-- corpus:end -->' in a markdown page
with a table file (make reliability-table). Writes the page through a temporary file and a rename."""
import os
import sys

page, table = sys.argv[1], sys.argv[2]
begin, end = "<!-- corpus:begin -->", "<!-- corpus:end -->"
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
print(f"{page}: corpus table rewritten ({body.count(chr(10)) - 1} cases)")
