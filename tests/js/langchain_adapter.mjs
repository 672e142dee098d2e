// Runs @ai-sdk/langchain's toUIMessageStream over recorded LangGraph stream events and reads the
// result with the AI SDK's readUIMessageStream, as a Next.js route + useChat would.
// Usage: node langchain_adapter.mjs <events.json>   events: [[mode, payload], ...]
// Prints the final UI message as JSON.
import { readFileSync } from "node:fs";
import { toUIMessageStream } from "@ai-sdk/langchain";
import { readUIMessageStream } from "ai";

const events = JSON.parse(readFileSync(process.argv[2], "utf8"));

async function* replay() {
  for (const event of events) yield event;
}

let last;
const errors = [];
for await (const message of readUIMessageStream({
  stream: toUIMessageStream(replay()),
  onError: (error) => errors.push(String(error)),
})) {
  last = message;
}
process.stdout.write(JSON.stringify({ message: last, errors }));
