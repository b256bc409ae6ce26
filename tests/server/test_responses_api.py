"""/v1/responses on fake runners, driven by the real `openai` client over the in-process app
(its HTTP client is the app's TestClient): every reply and stream event is also validated
strictly against the openai package's own pydantic types."""

from __future__ import annotations

import base64
import io
import json

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from PIL import Image
from pydantic import TypeAdapter

from hearth.server.api.responses.routes import ReplyAssembler
from hearth.server.api.responses.store import ResponseStore, StoredResponse
from hearth.server.service import Piece

TEMPLATE = (
    "{% if tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% for c in m.tool_calls or [] %}[call {{ c.function.name }} "
    "{{ c.function.arguments | tojson }}]{% endfor %}\n{% endfor %}"
    "{% if enable_thinking %}<think>{% endif %}assistant: "
)
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}  # fmt: skip
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
EVENTS = TypeAdapter(ResponseStreamEvent)


@pytest.fixture
def oa(fake_service):
    c = fake_service.client
    out = c.post("/api/create", json={"model": "tool-tiny", "from": "tiny",
                                      "template": TEMPLATE, "stream": False})  # fmt: skip
    assert out.json()["status"] == "success"
    return openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="unused", http_client=c)


def _prompt(fake_service) -> str:
    return fake_service.launcher.started[-1].requests[-1].prompt


def _stream(fake_service, body):
    """The raw events of a streamed request, each validated as the openai type it claims."""
    resp = fake_service.client.post("/v1/responses", json={**body, "stream": True})
    assert resp.status_code == 200 and "data: [DONE]" not in resp.text
    events = []
    for block in resp.text.strip().split("\n\n"):
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        EVENTS.validate_python(event)
        events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def _same_output(a, b):
    """Output items equal but for their generated ids (and the stream helper's parsed fields)."""

    def plain(value):
        if isinstance(value, dict):
            skip = ("id", "call_id", "parsed", "parsed_arguments")
            return {k: plain(v) for k, v in value.items() if k not in skip}
        return [plain(v) for v in value] if isinstance(value, list) else value

    return plain([o.to_dict() for o in a.output]) == plain([o.to_dict() for o in b.output])


def test_text_reply_streamed_the_same_and_stored(fake_service, oa):
    r = oa.responses.create(model="tiny", input="Hi", instructions="Be brief.", temperature=0)
    Response.model_validate(r.to_dict())
    assert r.status == "completed" and r.output_text == fake_service.launcher.script
    assert [o.type for o in r.output] == ["message"]
    assert r.output[0].content[0].annotations == []
    assert r.usage.output_tokens == 9 and r.usage.total_tokens > r.usage.output_tokens
    assert "system: Be brief." in _prompt(fake_service)
    assert fake_service.launcher.started[-1].requests[-1].options.temperature == 0
    with oa.responses.stream(model="tiny", input="Hi", instructions="Be brief.") as stream:
        final = stream.get_final_response()
    assert final.output_text == r.output_text and _same_output(final, r)
    assert oa.responses.retrieve(r.id).output_text == r.output_text
    events = _stream(fake_service, {"model": "tiny", "input": "Hi"})
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]  # fmt: skip
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]  # fmt: skip


def test_max_output_tokens_makes_an_incomplete_response(fake_service, oa):
    r = oa.responses.create(model="tiny", input="Hi", max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "Hello from " and r.output[0].status == "incomplete"
    assert (
        _stream(fake_service, {"model": "tiny", "input": "Hi", "max_output_tokens": 2})[-1]["type"]
        == "response.incomplete"
    )


def test_long_call_arguments_stream_as_written(fake_service, oa):
    args = {"city": "Paris on a long and winding road by the river", "days": [1, 2, 3]}
    fake_service.launcher.script = json.dumps({"name": "get_weather", "arguments": args})
    ask = {"model": "tool-tiny", "input": "Weather?", "tools": [WEATHER]}
    with oa.responses.stream(**ask) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 3
    [call] = final.output
    assert json.loads(call.arguments) == json.loads("".join(deltas)) == args
    assert json.loads(oa.responses.create(**ask).output[0].arguments) == args


def test_function_call_round_trip(fake_service, oa):
    fake_service.launcher.script = CALL
    first = oa.responses.create(model="tool-tiny", input="Weather in Paris?", tools=[WEATHER])
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id.startswith("call_")
    assert "get_weather" in _prompt(fake_service)  # the tool was offered
    with oa.responses.stream(model="tool-tiny", input="Weather in Paris?", tools=[WEATHER]) as s:
        assert _same_output(s.get_final_response(), first)
    events = _stream(fake_service, {"model": "tool-tiny", "input": "Weather?", "tools": [WEATHER]})
    kinds = [e["type"] for e in events]
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    # the arguments stream as the model writes them (the fake runner: word by word)
    assert len(deltas) > 1 and json.loads("".join(deltas)) == {"city": "Paris"}
    assert kinds[2:] == ["response.output_item.added",
                         *["response.function_call_arguments.delta"] * len(deltas),
                         "response.function_call_arguments.done", "response.output_item.done",
                         "response.completed"]  # fmt: skip
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done[0]["arguments"] == "".join(deltas)

    fake_service.launcher.script = "It is sunny in Paris."
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    # the whole conversation sent back, as a stateless client does
    items = [{"role": "user", "content": "Weather in Paris?"}, call.to_dict(), answer]
    final = oa.responses.create(model="tool-tiny", input=items, tools=[WEATHER])
    assert final.output_text == "It is sunny in Paris."
    prompt = _prompt(fake_service)
    assert 'assistant: [call get_weather {"city": "Paris"}]' in prompt
    assert "tool: sunny, 21 C" in prompt
    # or continued from the stored response
    follow = oa.responses.create(model="tool-tiny", previous_response_id=first.id,
                                 input=[answer], tools=[WEATHER])  # fmt: skip
    assert follow.output_text == "It is sunny in Paris." and _prompt(fake_service) == prompt


def test_a_required_tool_choice_constrains_the_output_to_a_call(fake_service, oa):
    fake_service.launcher.script = "not a call"
    oa.responses.create(model="tool-tiny", input="Weather?", tools=[WEATHER],
                        tool_choice={"type": "function", "name": "get_weather"})  # fmt: skip
    fmt = fake_service.launcher.started[-1].requests[-1].format
    assert fmt["properties"]["name"] == {"const": "get_weather"}
    with pytest.raises(openai.BadRequestError, match="not in tools"):
        oa.responses.create(model="tool-tiny", input="Weather?", tools=[WEATHER],
                            tool_choice={"type": "function", "name": "other"})  # fmt: skip
    oa.responses.create(model="tool-tiny", input="Weather?", tools=[WEATHER], tool_choice="none")
    assert "get_weather" not in _prompt(fake_service)


def test_text_format_json_schema_constrains_the_output(fake_service, oa):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}},
              "required": ["answer"]}  # fmt: skip
    r = oa.responses.create(model="tiny", input="The answer?", text={"format": {
        "type": "json_schema", "name": "a", "schema": schema, "strict": True}})  # fmt: skip
    assert json.loads(r.output_text) == {"answer": 42}
    assert fake_service.launcher.started[-1].requests[-1].format == schema
    assert r.text.format.type == "json_schema"
    oa.responses.create(model="tiny", input="JSON?", text={"format": {"type": "json_object"}})
    assert fake_service.launcher.started[-1].requests[-1].format == "json"


def test_previous_response_id_continues_and_store_false_forgets(fake_service, oa):
    first = oa.responses.create(model="tiny", input="My name is Ada.")
    oa.responses.create(model="tiny", input="What is my name?", previous_response_id=first.id)
    prompt = _prompt(fake_service)
    assert "user: My name is Ada.\nassistant: Hello from the fake runner" in prompt
    assert prompt.endswith("user: What is my name?\nassistant: ")
    with pytest.raises(openai.NotFoundError, match="no response with id 'resp_nope'"):
        oa.responses.create(model="tiny", input="Hi", previous_response_id="resp_nope")
    gone = oa.responses.create(model="tiny", input="Hi", store=False)
    with pytest.raises(openai.NotFoundError):
        oa.responses.retrieve(gone.id)
    oa.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        oa.responses.retrieve(first.id)


def test_the_store_keeps_the_last_responses():
    store = ResponseStore(limit=2)
    for i in range(3):
        store.put(StoredResponse({"id": f"r{i}", "output": []}, []))
    assert store.get("r0") is None and store.get("r1") is not None and len(store) == 2
    store.put(StoredResponse({"id": "r3", "output": []}, []))  # r1 was used: r2 goes
    assert store.get("r2") is None and store.get("r1") is not None


def _entry(key: str, text: str) -> StoredResponse:
    return StoredResponse({"id": key, "output": []}, [{"role": "user", "content": text}])


def test_the_store_is_capped_in_bytes_too_the_least_recently_used_out_first():
    one = _entry("r0", "x" * 1000).nbytes()
    assert one == len(json.dumps([{"id": "r0", "output": []},
                                  [{"role": "user", "content": "x" * 1000}]]))  # fmt: skip
    store = ResponseStore(limit=1000, max_bytes=3 * one)
    for i in range(3):
        assert store.put(_entry(f"r{i}", "x" * 1000))
    assert len(store) == 3 and store.nbytes == 3 * one
    assert store.get("r0") is not None  # r0 is used: r1 is the least recently used now
    assert store.put(_entry("r3", "x" * 1000))
    assert store.get("r1") is None and len(store) == 3 and store.nbytes <= store.max_bytes
    # two entries' worth pushes two out; one larger than the whole cap is not kept at all
    assert store.put(_entry("big", "x" * (2 * one)))
    assert store.nbytes <= store.max_bytes and len(store) == 1
    assert not store.put(_entry("huge", "é" * (2 * one)))  # counted in UTF-8 bytes
    assert store.get("huge") is None and store.get("big") is not None
    store.delete("big")
    assert (len(store), store.nbytes) == (0, 0)


def test_a_response_too_large_to_keep_is_a_404_with_a_sentence_on_follow_up(fake_service, oa):
    fake_service.app.state.responses = ResponseStore(max_bytes=64 * 1024)
    small = oa.responses.create(model="tiny", input="My name is Ada.")
    big = oa.responses.create(model="tiny", input="My name is Ada. " * 5000)  # ~80 kB
    assert big.status == "completed" and big.output_text  # answered all the same
    follow = oa.responses.create(model="tiny", input="And?", previous_response_id=small.id)
    assert follow.status == "completed"
    for request in (
        lambda: oa.responses.create(model="tiny", input="And?", previous_response_id=big.id),
        lambda: oa.responses.retrieve(big.id),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            request()
        said = str(caught.value)
        assert f"no response with id '{big.id}'" in said
        assert "at most 1000 of them and 0.0625 MiB in all" in said
        assert "a larger one is not kept" in said
    with pytest.raises(openai.NotFoundError) as unknown:
        oa.responses.create(model="tiny", input="Hi", previous_response_id="resp_nope")
    assert str(unknown.value).replace("resp_nope", big.id) == said  # the same 404


def test_reasoning_effort_thinks_and_gives_a_reasoning_item(fake_service, oa):
    fake_service.launcher.script = "<think>Paris is in France.</think>It is Paris."
    r = oa.responses.create(model="tool-tiny", input="Capital?", reasoning={"effort": "low"})
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text.strip() == "Paris is in France."
    assert r.output_text == "It is Paris." and "<think>" in _prompt(fake_service)
    events = _stream(fake_service, {"model": "tool-tiny", "input": "Capital?",
                                    "reasoning": {"effort": "low"}})  # fmt: skip
    kinds = [e["type"] for e in events]
    assert "response.reasoning_text.delta" in kinds
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    # the reasoning item goes back in as the assistant's thinking
    oa.responses.create(model="tool-tiny", input="And Spain?", previous_response_id=r.id)
    with pytest.raises(openai.BadRequestError, match="does not support thinking"):
        oa.responses.create(model="tiny", input="Hi", reasoning={"effort": "high"})


def test_the_assembler_places_whitespace_and_always_gives_a_message():
    reply = ReplyAssembler({"id": "resp_x"})
    reply.start()
    assert reply.feed(Piece(content="\n ")) == []  # opens nothing yet
    events = reply.finish([], {"done_reason": "stop", "eval_count": 1})
    assert [o["type"] for o in reply.output] == ["message"]
    assert reply.output[0]["content"][0]["text"] == "\n "
    assert events[-1]["type"] == "response.completed"


def test_a_reply_of_thoughts_only_closes_them_and_has_an_empty_message():
    reply = ReplyAssembler({"id": "resp_x"})
    reply.start()
    reply.feed(Piece(thinking="hmm"))
    events = reply.finish([], {"done_reason": "length", "eval_count": 1})
    assert [(o["type"], o["status"]) for o in reply.output] == [
        ("reasoning", "incomplete"), ("message", "incomplete")]  # fmt: skip
    kinds = [e["type"] for e in events]
    assert kinds.count("response.output_item.done") == 2 and kinds[-1] == "response.incomplete"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"input": [{"type": "computer_call_output", "call_id": "c"}]}, "'computer_call_output'"),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_image", "image_url": "https://example.com/a.png"}
                        ],
                    }
                ]
            },
            "not fetched",
        ),  # fmt: skip
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input_file",
        ),  # fmt: skip
        ({"input": [{"role": "robot", "content": "hi"}]}, "role must be"),
        ({"input": [{"role": ["user"], "content": "hi"}]}, "role must be"),
        ({"input": [{"role": "user", "content": [{"type": ["input_text"]}]}]}, "content part"),
        ({"input": [{"type": {}, "content": "hi"}]}, "items are not supported"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]},
            "not JSON",
        ),  # fmt: skip
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "'web_search' tools"),
        ({"input": "hi", "tool_choice": {"type": "file_search"}}, "'file_search'"),
        ({"input": "hi", "background": True}, "background"),
        ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "schema"),
        (
            {
                "input": "hi",
                "tools": [WEATHER],
                "tool_choice": "required",
                "text": {"format": {"type": "json_object"}},
            },
            "JSON text.format",
        ),  # fmt: skip
        ({"input": "hi", "temperature": 3}, "temperature"),
        ({"input": "hi", "options": {"typical_p": 0.5}}, "typical_p"),
        ({}, "input"),
    ],
)
def test_bad_requests_are_400_sentences(oa, body, words):
    with pytest.raises(openai.BadRequestError) as err:
        oa.responses.create(model="tiny", extra_body=body)
    assert words in err.value.body["message"]
    assert err.value.body["type"] == "invalid_request_error"


def test_an_unknown_model_is_not_found(oa):
    with pytest.raises(openai.NotFoundError):
        oa.responses.create(model="nope", input="hi")


def test_options_reach_the_runner(fake_service, oa):
    oa.responses.create(model="tiny", input="Hi", top_p=0.5,
                        extra_body={"options": {"num_ctx": 256, "top_k": 3}})  # fmt: skip
    runner = fake_service.launcher.started[-1]
    assert runner.options.num_ctx == 256
    assert runner.requests[-1].options.top_k == 3 and runner.requests[-1].options.top_p == 0.5


def test_a_failure_mid_stream_ends_it_with_an_error_event(fake_service):
    fake_service.launcher.die_after = 2
    events = _stream(fake_service, {"model": "tiny", "input": "Hi"})
    assert events[-1]["type"] == "error" and "stopped" in events[-1]["message"]
    assert "response.completed" not in [e["type"] for e in events]


def test_images_come_as_data_urls(oa):
    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    content = [{"type": "input_text", "text": "What is this?"},
               {"type": "input_image", "image_url": url}]  # fmt: skip
    # the image is read and checked: this model has no vision, so it is refused by name
    with pytest.raises(openai.BadRequestError, match="does not support images"):
        oa.responses.create(model="tiny", input=[{"role": "user", "content": content}])
