// Module hook registered by pi_runner.mjs: Pi's uuidv7() (pi-ai's utils/uuid.js, the source of
// every new session id) is replaced by a module that asks the running script for its next
// session id, so Pi and our store give a session the same id.
export async function load(url, context, nextLoad) {
	if (url.endsWith("/pi-ai/dist/utils/uuid.js")) {
		return { format: "module", shortCircuit: true, source: "export function uuidv7() { return globalThis.__apidiffSessionId(); }\n" };
	}
	return nextLoad(url, context);
}
