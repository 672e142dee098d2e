// Drives the AI SDK's own chat client (the engine behind useChat) against a server.
// Usage: node chat_client.mjs <config.json>   config: {url, chatId, turns: [text...]}
// Prints one JSON object: {messages, onData, errors, status}.
import { readFileSync } from "node:fs";
import { AbstractChat, DefaultChatTransport } from "ai";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));

class PlainState {
  constructor() { this.status = "ready"; this.error = undefined; this.messages = []; }
  pushMessage(message) { this.messages = this.messages.concat(message); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) { this.messages = this.messages.map((m, i) => (i === index ? message : m)); }
  snapshot(thing) { return structuredClone(thing); }
}

const onData = [];
const errors = [];
const contentTypes = [];
const chat = new AbstractChat({
  id: config.chatId,
  state: new PlainState(),
  transport: new DefaultChatTransport({
    api: config.url,
    fetch: async (input, init) => {
      const response = await fetch(input, init);
      contentTypes.push([response.headers.get("content-type"), response.headers.get("x-vercel-ai-ui-message-stream")]);
      return response;
    },
  }),
  onData: (part) => onData.push(structuredClone(part)),
  onError: (error) => errors.push(String(error)),
});

for (const text of config.turns) {
  await chat.sendMessage({ text });
  if (chat.status === "error") break;
}
process.stdout.write(JSON.stringify({ messages: chat.messages, onData, errors, status: chat.status, contentTypes }));
