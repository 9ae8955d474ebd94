// Applies operation scripts (see script.py) to the REAL Pi SessionManager and prints, per script,
// one JSON line {name, results, states, files}: the same outcome script.py computes for our store.
//
//   run.sh tests/apidiff/pi_runner.mjs ORACLE_LIB_MJS SCRIPTS.jsonl > OUTCOMES.jsonl
//
// Determinism: the oracle's lib.mjs patches randomUUID and Date (its fake clock is what `clock`
// ops set); Pi's uuidv7() (session ids) is replaced at load time by the script's session stream
// (uuid_hook.mjs), so both sides draw the very same ids. Sessions are named by id in scripts; Pi
// names them by file, so the runner keeps the map, and writes a header's parentSession (a path in
// Pi) as the session id it names (our store has no file paths).
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { register } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [libPath, scriptsPath] = process.argv.slice(2);
register(pathToFileURL(join(import.meta.dirname, "uuid_hook.mjs")).href);
const lib = await import(pathToFileURL(libPath).href);

let ids = null; // the running script's id source
function streamValue(seed, kind, k) {
	const h = createHash("sha256").update(`${seed}:${kind}:${k}`).digest("hex");
	const version = kind === "uuid" ? "4" : "7";
	return `${h.slice(0, 8)}-${h.slice(8, 12)}-${version}${h.slice(13, 16)}-${"89ab"[parseInt(h[16], 16) & 3]}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
function draw(kind) {
	if (ids.forced[kind].length) return ids.forced[kind].shift();
	return streamValue(ids.seed, kind, ids.drawn[kind]++);
}
globalThis.__apidiffSessionId = () => draw("session");
const never = () => { throw new Error("unexpected randomness outside randomUUID/uuidv7"); };
lib.installDeterminism({ randomUUID: () => draw("uuid"), randomBytes: never, mathRandom: never });
const pi = await lib.loadPi();
const { SessionManager } = pi;

/** Our error class for a message Pi throws (anything else is reported as it is). */
function errorName(error) {
	const m = String(error?.message ?? error);
	if (/^Entry .* not found$/s.test(m)) return "EntryNotFound";
	if (/^Entry .* is not on the active branch$/s.test(m)) return "NotOnActiveBranch";
	if (/^Entry .* does not contribute editable model content$/s.test(m)) return "NotEditable";
	if (m.startsWith("Context edit replacement must be null")) return "InvalidReplacement";
	if (m.startsWith("Session id must be non-empty")) return "InvalidSessionId";
	if (m.startsWith("Cannot fork: source session file is empty or invalid")) return "SessionNotFound";
	return `${error?.name ?? "Error"}: ${m}`;
}

class NotFound extends Error {}

function runScript(script) {
	ids = { seed: script.seed, forced: { uuid: [], session: [] }, drawn: { uuid: 0, session: 0 } };
	lib.clock.now = script.start;
	const dir = mkdtempSync(join(tmpdir(), "apidiff-"));
	const fileOf = new Map(); // session id -> file Pi uses for it
	const idOf = new Map(); // file -> session id
	const results = [];
	const states = [];
	let sm = null;
	const remember = () => {
		const file = sm?.getSessionFile();
		if (file && !idOf.has(file)) {
			idOf.set(file, sm.getSessionId());
			fileOf.set(sm.getSessionId(), file);
		}
	};
	const line = (value) => `${JSON.stringify(value)}\n`;
	const header = (h) => (h && typeof h.parentSession === "string" && idOf.has(h.parentSession)
		? { ...h, parentSession: idOf.get(h.parentSession) } : h);
	const snapshot = () => [header(sm.getHeader()), ...sm.getEntries()].map(line).join("");
	const switchTo = (next) => {
		sm = next;
		remember();
		return { sessionId: sm.getSessionId(), cwd: sm.getCwd(), persisted: sm.isPersisted() };
	};
	const stored = (id) => {
		const file = fileOf.get(id);
		if (file === undefined || !existsSync(file)) throw new NotFound();
		return file;
	};
	const call = (op, a) => {
		switch (op) {
			case "clock": lib.clock.now = a[0]; return null;
			case "uuids": ids.forced.uuid.push(...a[0]); return null;
			case "sessionIds": ids.forced.session.push(...a[0]); return null;
			case "create": return switchTo(SessionManager.create(a[0], dir, a[1]));
			case "inMemory": return switchTo(SessionManager.inMemory(a[0], a[1]));
			case "open": return switchTo(SessionManager.open(stored(a[0]), dir));
			case "continueRecent": return switchTo(SessionManager.continueRecent(a[0], dir));
			case "forkFrom": return switchTo(SessionManager.forkFrom(fileOf.get(a[0]) ?? join(dir, "none.jsonl"), a[1], dir, a[2]));
			case "appendMessage": return sm.appendMessage(a[0]);
			case "appendThinkingLevelChange": return sm.appendThinkingLevelChange(a[0]);
			case "appendModelChange": return sm.appendModelChange(a[0], a[1]);
			case "appendUsage": return sm.appendUsage(...a);
			case "appendCompaction": return sm.appendCompaction(...a);
			case "compact": {
				const prep = pi.prepareCompaction(sm.getBranch(), { enabled: true, reserveTokens: 16384, keepRecentTokens: a[0] });
				if (!prep) return null;
				const { readFiles, modifiedFiles } = pi.computeFileLists(prep.fileOps);
				return sm.appendCompaction(a[1], prep.firstKeptEntryId, prep.tokensBefore, { readFiles, modifiedFiles });
			}
			case "appendCustomEntry": return sm.appendCustomEntry(...a);
			case "appendSessionInfo": return sm.appendSessionInfo(a[0]);
			case "appendCustomMessageEntry": return sm.appendCustomMessageEntry(...a);
			case "appendLabelChange": return sm.appendLabelChange(...a);
			case "appendContextEdit": return sm.appendContextEdit(a[0], a[1]);
			case "branch": return sm.branch(a[0]);
			case "resetLeaf": return sm.resetLeaf();
			case "branchWithSummary": return sm.branchWithSummary(...a);
			case "createBranchedSession": sm.createBranchedSession(a[0]); remember(); return sm.getSessionId();
			case "getSessionName": return sm.getSessionName();
			case "getLabel": return sm.getLabel(a[0]);
			default: throw new Error(`unknown op ${op}`);
		}
	};
	try {
		for (const { op, args = [] } of script.ops) {
			if (sm && ["create", "inMemory", "open", "continueRecent", "forkFrom"].includes(op)) states.push(snapshot());
			let record;
			try {
				record = { ret: call(op, args) ?? null };
			} catch (error) {
				record = { error: error instanceof NotFound ? "SessionNotFound" : errorName(error) };
			}
			record.leaf = sm ? sm.getLeafId() : null;
			results.push(record);
		}
		if (sm) states.push(snapshot());
		const files = {};
		for (const name of readdirSync(dir).sort()) {
			const text = readFileSync(join(dir, name), "utf8");
			const nl = text.indexOf("\n");
			const head = header(JSON.parse(text.slice(0, nl)));
			const key = head.id in files ? `${head.id} (second file ${name})` : head.id;
			files[key] = line(head) + text.slice(nl + 1);
		}
		return { name: script.name, results, states, files };
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}

const out = [];
for (const text of readFileSync(scriptsPath, "utf8").split("\n")) {
	if (text.trim()) out.push(`${JSON.stringify(runScript(JSON.parse(text)))}\n`);
	if (out.length >= 50) process.stdout.write(out.splice(0).join(""));
}
process.stdout.write(out.join(""));
