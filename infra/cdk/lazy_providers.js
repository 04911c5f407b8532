// Loaded into jsii's Node kernel before anything else (NODE_OPTIONS --require, set by infra/__init__.py): each
// prebuilt provider's bindings (@cdktn/provider-google, -kubernetes, -helm) load the resource modules a stack uses,
// not all of them.
//
// A provider package's lib/index.js requires every one of its resource modules when it is loaded
// (`exports.computeInstance = __importStar(require("./compute-instance"));`, 1,815 lines for google 20.2.0), and
// jsii's kernel loads it whole to find any one class: 1.75 s of a 4.8-s synth of every environment for google, 0.9
// for kubernetes, measured with JSII_DEBUG_TIMING=1. Here each such line becomes a property that requires its module
// the first time it is read, and then holds it: what is read is the same module object, so the synthesized stacks are
// byte for byte the same (tests/unit/cdk/test_lazy_providers.py holds both). A line of another shape is left as it
// is, so a provider whose generated index changes shape loads eagerly, as without this file.
"use strict";
const fs = require("fs");
const Module = require("module");

const INDEX = /[\\/]@cdktn[\\/]provider-[^\\/]+[\\/]lib[\\/]index\.js$/;
const EAGER = /^exports\.([A-Za-z_$][\w$]*) = __importStar\(require\("(\.\/[^"]+)"\)\);$/gm;

function lazy(source) {
  return source.replace(EAGER, (_, name, target) => {
    const key = JSON.stringify(name);
    return (
      `Object.defineProperty(exports, ${key}, { enumerable: true, configurable: true, get() { ` +
      `const value = __importStar(require(${JSON.stringify(target)})); ` +
      `Object.defineProperty(exports, ${key}, { enumerable: true, configurable: true, value }); return value; } });`
    );
  });
}

const load = Module._extensions[".js"];
Module._extensions[".js"] = function (module, filename) {
  if (!INDEX.test(filename)) {
    return load(module, filename);
  }
  return module._compile(lazy(fs.readFileSync(filename, "utf8")), filename);
};

module.exports = { lazy };
