#!/usr/bin/env node
// Serves one JSON document over HTTPS at one path: the token issuer's JWKS for the container
// fleet test, on the test's container network.
//
// Usage: node jwks-server.mjs NAME:PORT PATH FILE CERT_FILE KEY_FILE
// Answers GET PATH with FILE when the request's Host is NAME, 404 otherwise; prints
// `LISTENING https://NAME:PORT/PATH` once listening; stops on SIGTERM.

import { readFileSync } from 'node:fs';
import https from 'node:https';
import process from 'node:process';

const [listen, path, file, cert, key] = process.argv.slice(2);
const match = /^([A-Za-z0-9.-]+):(\d{1,5})$/.exec(listen ?? '');
if (!match || !path || !file || !cert || !key) {
  process.stderr.write('usage: jwks-server.mjs NAME:PORT PATH FILE CERT_FILE KEY_FILE\n');
  process.exit(2);
}
const [, name, port] = match;
const body = readFileSync(file);

const server = https.createServer({ cert: readFileSync(cert), key: readFileSync(key) }, (req, res) => {
  const host = (req.headers.host ?? '').replace(/:\d+$/, '').toLowerCase();
  const url = new URL(req.url ?? '/', 'https://localhost');
  if (req.method === 'GET' && host === name && url.pathname === path) {
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'max-age=300' });
    res.end(body);
  } else {
    res.writeHead(404, { 'Content-Type': 'text/plain' });
    res.end('Not found\n');
  }
});
server.listen(Number(port), '0.0.0.0', () => process.stdout.write(`LISTENING https://${name}:${port}${path}\n`));
process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  process.exit(0);
});
