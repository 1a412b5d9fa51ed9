#!/usr/bin/env node
// The `turnstone` command line (every subcommand of the Rust binary but
// `serve`), run in this process by the native module: `npm install` links it
// as the package's `turnstone` bin.
'use strict'
const native = require('./turnstone.node')

process.exitCode = native.cliMain(['turnstone', ...process.argv.slice(2)])
