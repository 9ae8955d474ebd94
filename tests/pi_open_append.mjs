// Pi's SessionManager opens FILE (sessions folder DIR), appends one user message, and prints the
// file's bytes: what Pi does to a file whose last line has no newline (tests/test_live_oracle.py).
import { SessionManager } from "@earendil-works/pi-coding-agent";
import { readFileSync } from "node:fs";

const [file, dir] = process.argv.slice(2);
SessionManager.open(file, dir).appendMessage({ role: "user", content: "appended", timestamp: 1 });
process.stdout.write(readFileSync(file));
