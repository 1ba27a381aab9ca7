// node --liftoff-only parse-ps1.mjs FILE... parses each PowerShell file with the tree-sitter
// PowerShell grammar and prints one JSON object per file: {file, errors, commands,
// functions, params, ps7}. errors lists every ERROR or MISSING node (line:column and the
// text there); commands is every command name the script invokes, functions every function
// it defines, params its own param() block's parameter names, and ps7 every use of syntax
// Windows PowerShell 5.1 lacks (the && and || pipeline chains; the grammar already rejects
// ?: and ??).
import { Parser, Language } from 'web-tree-sitter';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
await Parser.init();
const lang = await Language.load(require.resolve('tree-sitter-powershell/tree-sitter-powershell.wasm'));
const parser = new Parser();
parser.setLanguage(lang);

for (const file of process.argv.slice(2)) {
  const tree = parser.parse(readFileSync(file, 'utf8'));
  const errors = [];
  const commands = new Set();
  const functions = new Set();
  const params = [];
  const ps7 = [];
  // A cursor walk: asking every node for its children array is far slower.
  const cursor = tree.walk();
  const visit = () => {
    const type = cursor.nodeType;
    if (type === 'ERROR' || cursor.currentNode.isMissing) {
      const n = cursor.currentNode;
      const where = `${n.startPosition.row + 1}:${n.startPosition.column + 1}`;
      errors.push(`${where}: ${n.isMissing ? 'missing ' + n.type : 'syntax error at ' + JSON.stringify(n.text.slice(0, 80))}`);
      return;
    }
    if (type === 'command_name') commands.add(cursor.nodeText);
    if (type === 'function_name') functions.add(cursor.nodeText);
    if (type === 'pipeline_chain_tail') {
      const p = cursor.startPosition;
      ps7.push(`${p.row + 1}:${p.column + 1}: ${cursor.nodeText}`);
    }
    if (type === 'script_parameter') {
      const n = cursor.currentNode;
      if (n.parent?.parent?.type === 'param_block' && n.parent.parent.parent?.type === 'program') {
        const v = n.children.find((c) => c.type === 'variable');
        if (v) params.push(v.text);
      }
    }
    if (cursor.gotoFirstChild()) {
      do visit(); while (cursor.gotoNextSibling());
      cursor.gotoParent();
    }
  };
  visit();
  console.log(JSON.stringify({ file, errors, commands: [...commands].sort(), functions: [...functions].sort(), params, ps7 }));
}
