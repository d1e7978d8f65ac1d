// The package as it is published: no runtime dependencies, an exports map that resolves, and a
// declaration for everything the modules export (the .d.ts files are written by hand).
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";

const root = new URL("../", import.meta.url);
const pkg = JSON.parse(readFileSync(new URL("package.json", root)));

test("the package has no runtime dependencies and asks for Node 20", () => {
  assert.equal(pkg.name, "@kintsugi/client");
  assert.equal(pkg.type, "module");
  assert.equal(pkg.dependencies, undefined);
  assert.equal(pkg.engines.node, ">=20");
});

test("every entry of the exports map exists and every runtime export is declared", async () => {
  for (const [entry, target] of Object.entries(pkg.exports)) {
    if (typeof target === "string") continue;
    assert.ok(existsSync(new URL(target.import, root)), `${entry}: ${target.import}`);
    assert.ok(existsSync(new URL(target.types, root)), `${entry}: ${target.types}`);
    const declared = new Set();
    const read = (file) => {
      const text = readFileSync(new URL(file, root), "utf8");
      for (const m of text.matchAll(/export declare (?:class|function|const) (\w+)/g)) declared.add(m[1]);
      for (const m of text.matchAll(/export \* from "\.\/(\w+)\.js"/g)) read(`src/${m[1]}.d.ts`);
    };
    read(target.types);
    const runtime = Object.keys(await import(new URL(target.import, root)));
    assert.deepEqual(runtime.filter((name) => !declared.has(name)), [], `${entry} exports without a declaration`);
  }
});
