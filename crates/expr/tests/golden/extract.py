"""Pulls the expressions out of postbox-expr's unit tests, to replay them against DynamoDB Local.

usage: python3 tests/golden/extract.py > /tmp/cases.json    (from crates/expr)
"""
import json, re, sys
from pathlib import Path

root = Path(__file__).resolve().parents[2] / 'src'
def rust_str(s):
    # Rust string literal body -> Python string (handles \" and \\ and \t \n \r)
    return json.loads('"' + s + '"')
STR = r'"((?:[^"\\]|\\.)*)"'
cases = []
src = open(f'{root}/condition/tests.rs').read()
for m in re.finditer(r'\(\s*' + STR + r',\s*(?:"(true|false)"|syntax|invalid|' + STR + r')', src):
    cases.append({'kind': 'condition', 'expr': rust_str(m.group(1))})
for m in re.finditer(r'check(?:_no_item)?\(\s*' + STR + r',', src):
    cases.append({'kind': 'condition', 'expr': rust_str(m.group(1)), 'no_item': 'check_no_item' in src[m.start():m.start()+15]})
src = open(f'{root}/update/tests.rs').read()
for m in re.finditer(r'check\(\s*' + STR + r',\s*json!\((\{.*?\})\),', src):
    try:
        before = json.loads(m.group(2))
    except Exception:
        continue
    cases.append({'kind': 'update', 'expr': rust_str(m.group(1)), 'before': before})
for m in re.finditer(r'\(\s*' + STR + r',\s*(?:syntax|"[A-Z])', src):
    cases.append({'kind': 'update', 'expr': rust_str(m.group(1)), 'before': {}})
src = open(f'{root}/projection/tests.rs').read()
for m in re.finditer(r'check\(\s*' + STR + r',', src):
    cases.append({'kind': 'projection', 'expr': rust_str(m.group(1))})
src = open(f'{root}/key_condition/tests.rs').read()
for m in re.finditer(r'\(\s*' + STR + r',\s*(?:r#)?"', src):
    e = rust_str(m.group(1))
    cases.append({'kind': 'key_condition', 'expr': e})
seen = set(); out = []
for c in cases:
    k = json.dumps(c, sort_keys=True)
    if k not in seen:
        seen.add(k); out.append(c)
json.dump(out, sys.stdout, indent=0, ensure_ascii=False)
