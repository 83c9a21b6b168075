"""Random conditions, projections and updates on random items, answered by DynamoDB Local.

From crates/expr, with DynamoDB Local on a port of its own:

    python3 tests/golden/random.py http://127.0.0.1:<port> [seed] [count] > tests/golden/dynamodb-local-random.json

Each case carries its own item (in "item" for conditions, "before" for updates), so
tests/dynamodb_local.rs replays them like the unit-test cases. The generator keeps to
expressions that parse, so most cases exercise evaluation and update semantics rather
than parse errors.
"""
import json, random, sys
from pathlib import Path

sys.argv += [None] * 3
endpoint, seed, count = sys.argv[1], int(sys.argv[2] or 7), int(sys.argv[3] or 400)
rng = random.Random(seed)
# The client, the tables and run() of record.py; run() reads ITEM and placeholders() as globals.
exec((Path(__file__).with_name('record.py')).read_text().split("tables()\ncases")[0])

ATTRS = ['a', 'b', 'c']

def scalar():
    return rng.choice([
        lambda: {'N': str(rng.randint(-3, 3))},
        lambda: {'N': rng.choice(['0.5', '-1.25', '1E+2', '3.0'])},
        lambda: {'S': rng.choice(['', 'a', 'ab', 'b', 'ba', 'é'])},
        lambda: {'B': rng.choice(['AQ==', 'AQI=', 'Ag=='])},
        lambda: {'BOOL': rng.random() < 0.5},
        lambda: {'NULL': True},
    ])()

def value(depth=0):
    r = rng.random()
    if depth < 2 and r < 0.15:
        return {'L': [value(depth + 1) for _ in range(rng.randint(0, 3))]}
    if depth < 2 and r < 0.3:
        return {'M': {k: value(depth + 1) for k in rng.sample(ATTRS, rng.randint(0, 2))}}
    if r < 0.38:
        return {'SS': sorted(set(rng.choice(['a', 'b', 'c']) for _ in range(rng.randint(1, 3))))}
    if r < 0.44:
        return {'NS': sorted(set(str(rng.randint(1, 4)) for _ in range(rng.randint(1, 3))))}
    return scalar()

def item():
    out = {k: value() for k in rng.sample(ATTRS, rng.randint(0, 3))}
    return out

def path():
    p = rng.choice(ATTRS)
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
        p += rng.choice(['.' + rng.choice(ATTRS), f'[{rng.randint(0, 3)}]'])
    return p

class Vals:
    def __init__(self): self.values = {}
    def new(self, v=None):
        name = f':v{len(self.values)}'
        self.values[name] = v if v is not None else value()
        return name

def operand(vals, allow_size=True):
    r = rng.random()
    if r < 0.45: return path()
    if r < 0.9 or not allow_size: return vals.new(scalar() if rng.random() < 0.8 else value())
    return f'size({path()})'

def ordered_value(vals):
    return vals.new(rng.choice([lambda: {'N': str(rng.randint(-3, 3))}, lambda: {'S': rng.choice(['a', 'b', 'ab'])}])())

def condition(vals, depth=0):
    r = rng.random()
    if depth < 3 and r < 0.25:
        op = rng.choice(['AND', 'OR'])
        return f'({condition(vals, depth + 1)}) {op} ({condition(vals, depth + 1)})'
    if depth < 3 and r < 0.32:
        return f'NOT ({condition(vals, depth + 1)})'
    kind = rng.choice(['cmp', 'cmp', 'ord', 'between', 'in', 'exists', 'type', 'begins', 'contains', 'size'])
    if kind == 'cmp':
        return f'{path()} {rng.choice(["=", "<>"])} {operand(vals)}'
    if kind == 'ord':
        return f'{path()} {rng.choice(["<", "<=", ">", ">="])} {ordered_value(vals)}'
    if kind == 'between':
        lo, hi = sorted([rng.randint(-3, 3), rng.randint(-3, 3)])
        return f'{path()} BETWEEN {vals.new({"N": str(lo)})} AND {vals.new({"N": str(hi)})}'
    if kind == 'in':
        return f'{path()} IN ({", ".join(vals.new(scalar()) for _ in range(rng.randint(1, 3)))})'
    if kind == 'exists':
        return f'{rng.choice(["attribute_exists", "attribute_not_exists"])}({path()})'
    if kind == 'type':
        t = rng.choice(['S', 'N', 'B', 'BOOL', 'NULL', 'L', 'M', 'SS', 'NS', 'BS'])
        return f'attribute_type({path()}, {vals.new({"S": t})})'
    if kind == 'begins':
        return f'begins_with({path()}, {vals.new(rng.choice([{"S": "a"}, {"S": ""}, {"B": "AQ=="}]))})'
    if kind == 'contains':
        return f'contains({path()}, {vals.new(scalar())})'
    return f'size({path()}) {rng.choice(["=", "<", ">="])} {vals.new({"N": str(rng.randint(0, 3))})}'

def update(vals):
    used, clauses = [], {}
    def fresh():
        for _ in range(20):
            p = path()
            base = p.replace('[', '.[').split('.')
            if all(not (u == p or p.startswith(u + '.') or p.startswith(u + '[') or u.startswith(p + '.') or u.startswith(p + '[')) for u in used):
                used.append(p)
                return p
        return None
    for _ in range(rng.randint(1, 3)):
        clause = rng.choice(['SET', 'SET', 'REMOVE', 'ADD', 'DELETE'])
        p = fresh()
        if p is None:
            continue
        if clause == 'SET':
            r = rng.random()
            if r < 0.4: rhs = vals.new(value())
            elif r < 0.6: rhs = f'{rng.choice(ATTRS)} {rng.choice(["+", "-"])} {vals.new({"N": str(rng.randint(-2, 2))})}'
            elif r < 0.8: rhs = f'if_not_exists({path()}, {vals.new(value())})'
            else: rhs = f'list_append({rng.choice(ATTRS)}, {vals.new({"L": [scalar()]})})'
            action = f'{p} = {rhs}'
        elif clause == 'REMOVE':
            action = p
        elif clause == 'ADD':
            action = f'{p} {vals.new(rng.choice([{"N": str(rng.randint(-2, 2))}, {"SS": ["a", "c"]}, {"NS": ["1"]}]))}'
        else:
            action = f'{p} {vals.new(rng.choice([{"SS": ["a"]}, {"NS": ["1", "2"]}, {"SS": ["b", "c"]}]))}'
        clauses.setdefault(clause, []).append(action)
    if not clauses:
        clauses['REMOVE'] = ['a']
    order = list(clauses)
    rng.shuffle(order)
    return ' '.join(f'{c} {", ".join(clauses[c])}' for c in order)

tables()
cases = []
for i in range(count):
    vals = Vals()
    if i % 3 == 0:
        expr, it = condition(vals), item()
        it['pk'] = {'S': 'p'}
        case = {'kind': 'condition', 'expr': expr, 'item': it}
    elif i % 3 == 1:
        expr, it = ', '.join(path() for _ in range(rng.randint(1, 4))), item()
        it['pk'] = {'S': 'p'}
        case = {'kind': 'projection', 'expr': expr, 'item': it}
    else:
        expr = update(vals)
        case = {'kind': 'update', 'expr': expr, 'before': item()}
    if vals.values:
        case['values'] = vals.values
    if case['kind'] in ('condition', 'projection'):
        ITEM = to_wire(it)
    VALUES = to_wire(vals.values)
    def placeholders(e, values=VALUES):
        return {'ExpressionAttributeValues': values} if values else {}
    answer = run(case)
    if case['kind'] in ('condition', 'projection'):
        case['item'] = it
    case['dynamodb_local'] = answer
    cases.append(case)
json.dump({'about': 'Random expressions answered by DynamoDB Local; see tests/golden/random.py.', 'item': {}, 'cases': cases},
          sys.stdout, indent=1, ensure_ascii=False, sort_keys=True)
