"""Replays expression cases against DynamoDB Local and records its answers.

From crates/expr, with DynamoDB Local started by scripts/dynamodb-local.sh on a port of its own:

    python3 tests/golden/extract.py > /tmp/cases.json
    python3 tests/golden/record.py http://127.0.0.1:<port> /tmp/cases.json > tests/golden/dynamodb-local.json

It creates the tables exprcond (pk) and exprkeys (pk, sk) and writes items with pk "p", "upd"
and reads "nokey". The fixture item and placeholders are read from src/fixtures.rs, so the
recorded answers always concern the same data as the unit tests. Needs boto3.
"""
import json, re, sys
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, cases_path = sys.argv[1], sys.argv[2]
ddb = boto3.client('dynamodb', endpoint_url=endpoint, region_name='us-east-1',
                   aws_access_key_id='x', aws_secret_access_key='x',
                   config=Config(retries={'max_attempts': 1}, parameter_validation=False))

fixtures = (Path(__file__).resolve().parents[2] / 'src' / 'fixtures.rs').read_text()
def block(after):
    i = fixtures.index(after) + len(after)
    depth = 0
    for j in range(i, len(fixtures)):
        ch = fixtures[j]
        if ch == '{': depth += 1
        elif ch == '}':
            depth -= 1
            if depth == 0:
                return json.loads(fixtures[i:j+1])
VALUES = block('let doc = json!(')
ITEM = block('parse_item(&json!(')
NAMES = dict(re.findall(r'\("(#\w+)", "([^"]+)"\)', fixtures))

import base64
def to_wire(v):
    # boto3 wants bytes for B and BS and encodes them itself.
    if isinstance(v, dict):
        if set(v) == {'B'}: return {'B': base64.b64decode(v['B'])}
        if set(v) == {'BS'}: return {'BS': [base64.b64decode(x) for x in v['BS']]}
        return {k: to_wire(x) for k, x in v.items()}
    if isinstance(v, list): return [to_wire(x) for x in v]
    return v
def from_wire(v):
    if isinstance(v, (bytes, bytearray)): return base64.b64encode(v).decode()
    if isinstance(v, dict): return {k: from_wire(x) for k, x in v.items()}
    if isinstance(v, list): return [from_wire(x) for x in v]
    return v
VALUES = to_wire(VALUES)
ITEM = to_wire(ITEM)

def tables():
    existing = ddb.list_tables()['TableNames']
    for name, keys in [('exprcond', [('pk', 'HASH')]), ('exprkeys', [('pk', 'HASH'), ('sk', 'RANGE')])]:
        if name in existing:
            continue
        ddb.create_table(TableName=name, BillingMode='PAY_PER_REQUEST',
                         KeySchema=[{'AttributeName': a, 'KeyType': t} for a, t in keys],
                         AttributeDefinitions=[{'AttributeName': a, 'AttributeType': 'S'} for a, _ in keys])

def placeholders(expr):
    p = {}
    names = {k: NAMES[k] for k in set(re.findall(r'#\w+', expr)) if k in NAMES}
    values = {k: VALUES[k] for k in set(re.findall(r':\w+', expr)) if k in VALUES}
    if names: p['ExpressionAttributeNames'] = names
    if values: p['ExpressionAttributeValues'] = values
    return p

def run(case):
    kind, expr = case['kind'], case['expr']
    ph = placeholders(expr)
    try:
        if kind == 'condition':
            if case.get('no_item'):
                ddb.delete_item(TableName='exprcond', Key={'pk': {'S': 'nokey'}}, ConditionExpression=expr, **ph)
            else:
                # A condition on PutItem is checked against the stored item:
                # store it first, then put it again under the condition.
                ddb.put_item(TableName='exprcond', Item=ITEM)
                ddb.put_item(TableName='exprcond', Item=ITEM, ConditionExpression=expr, **ph)
            return {'holds': True}
        if kind == 'update':
            before = to_wire(dict(case['before'])); before['pk'] = {'S': 'upd'}
            ddb.put_item(TableName='exprcond', Item=before)
            out = ddb.update_item(TableName='exprcond', Key={'pk': {'S': 'upd'}}, UpdateExpression=expr,
                                  ReturnValues='ALL_NEW', **ph)
            after = out.get('Attributes', {}); after.pop('pk', None)
            return {'item': from_wire(after)}
        if kind == 'projection':
            ddb.put_item(TableName='exprcond', Item=ITEM)
            got = ddb.get_item(TableName='exprcond', Key={'pk': {'S': 'p'}}, ProjectionExpression=expr, **{k: v for k, v in ph.items() if k == 'ExpressionAttributeNames'})
            return {'item': from_wire(got.get('Item', {}))}
        if kind == 'key_condition':
            ddb.query(TableName='exprkeys', KeyConditionExpression=expr, **ph)
            return {'ok': True}
    except ClientError as e:
        code = e.response['Error']['Code']
        if code == 'ConditionalCheckFailedException':
            return {'holds': False}
        return {'error': e.response['Error'].get('Message', ''), 'code': code}

tables()
cases = json.load(open(cases_path))
for c in cases:
    c['dynamodb_local'] = run(c)
    ph = placeholders(c['expr'])
    if c['kind'] == 'projection':
        ph.pop('ExpressionAttributeValues', None)
    if 'ExpressionAttributeNames' in ph: c['names'] = ph['ExpressionAttributeNames']
    if 'ExpressionAttributeValues' in ph: c['values'] = from_wire(ph['ExpressionAttributeValues'])
    if not c.get('no_item'):
        c.pop('no_item', None)
doc = {
    'about': 'Answers of DynamoDB Local to the expressions of postbox-expr unit tests; '
             'regenerate with tests/golden/record.py (see its docstring).',
    'item': from_wire(ITEM),
    'cases': cases,
}
json.dump(doc, sys.stdout, indent=1, ensure_ascii=False, sort_keys=True)
