"""A client of the example server: one user turn, streamed, with OM's parts from the custom stream.

Start the server first (``python dev_server.py --allow-blocking`` in this folder). The client finds the
port it took (``dev_server.find_server``): ``LANGGRAPH_PORT`` if set, else the port the server noted,
else 2024 and the next few; with none answering it says which port to set.
"""

import asyncio

from dev_server import find_server
from langgraph_sdk import get_client


async def main() -> None:
    url = find_server()
    client = get_client(url=url)
    thread = await client.threads.create()
    async for part in client.runs.stream(
        thread["thread_id"], "agent",
        input={"messages": [{"role": "user", "content": "I'm vegetarian and I fly to Tokyo on April 4."}]},
        stream_mode=["custom", "messages-tuple"],
    ):
        if part.event == "custom":  # OM's data-om-* payloads: {"type", "id", "data", "transient"?}
            print(part.data["type"], part.data["id"])
        elif part.event == "messages" and part.data[0].get("type") == "AIMessageChunk":
            print(part.data[0]["content"], end="", flush=True)
    print(f"\nthread {thread['thread_id']} on {url}")


if __name__ == "__main__":
    asyncio.run(main())
