"""``n`` choices and ``echo`` on the real server (real llama.cpp worker, real uvicorn), through the official
``openai`` SDK: n choices numbered 0..n-1 with distinct seeds (the request's seed + the index), streamed choice after
choice, usage counting the prompt once; ``/v1/completions`` ``echo`` with the prompt's tokens' logprobs (the first
null) and ``max_tokens`` 0, as lm-evaluation-harness's loglikelihood tasks send it; Ollama refuses echo."""

from __future__ import annotations

from collections import defaultdict

import openai
import pytest

from app.services import starter_model
from app.services.api.catalog import ollama_lister
from app.services.api.config import ServerConfig
from app.services.engines.events import VllmEndpoint
from app.services.ollama.shared import SharedOllama
from tests.support.api_harness import ApiHarness
from tests.support.fake_ollama import FakeOllama
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(300)

HI = [{"role": "user", "content": "hello there"}]
PROMPT = "The capital of France is Paris. The capital of Italy is"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-n-echo")
    write_tiny_gguf(folder / "tiny.gguf", name="tiny", never_eos=True)  # every choice runs to max_tokens
    if starter_model.package_installed():
        starter_model.ensure_starter_model(folder)
    return folder


@pytest.fixture(scope="module")
def api(folder):
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


@pytest.fixture
def gemma(folder):
    if not (folder / starter_model.FILE_NAME).exists():
        pytest.skip(f"the starter model's package ({starter_model.PACKAGE}) is not installed")
    return "Gemma 3 270M"


# --- n ------------------------------------------------------------------------------------------------------------
def test_n_choices_are_numbered_distinct_seeded_and_count_the_prompt_once(api):
    client = api.openai()
    asked = {"model": "tiny", "messages": HI, "max_tokens": 8, "temperature": 1.5, "seed": 7}
    three = client.chat.completions.create(n=3, **asked)
    assert [c.index for c in three.choices] == [0, 1, 2]
    texts = [c.message.content for c in three.choices]
    assert len(set(texts)) > 1 and all(c.finish_reason == "length" for c in three.choices)
    one = client.chat.completions.create(**asked)
    assert texts[0] == one.choices[0].message.content  # choice 0 has the request's seed, choice i seed + i
    seeded = client.chat.completions.create(**{**asked, "seed": 8})
    assert texts[1] == seeded.choices[0].message.content
    assert three.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt once, as OpenAI counts it
    assert three.usage.completion_tokens == 3 * 8 == three.usage.total_tokens - three.usage.prompt_tokens
    assert client.chat.completions.create(n=3, **asked).model_dump()["choices"] == three.model_dump()["choices"]
    record = api.finished_records("chat.completions")[-1]
    assert record.completion_tokens == 24 and record.status == 200


def test_n_choices_stream_one_after_another_with_their_index(api):
    client = api.openai()
    asked = {"model": "tiny", "messages": HI, "max_tokens": 6, "temperature": 1.5, "seed": 11, "n": 3}
    whole = client.chat.completions.create(**asked)
    texts, finishes, usage, roles = defaultdict(str), {}, None, set()
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **asked):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            roles.add((choice.index, choice.delta.role)) if choice.delta.role else None
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert dict(texts) == {c.index: c.message.content for c in whole.choices}  # the same seeds, the same choices
    assert finishes == {0: "length", 1: "length", 2: "length"} and roles == {(0, "assistant"), (1, "assistant"),
                                                                            (2, "assistant")}  # fmt: skip
    assert usage is not None and usage.completion_tokens == 18 and usage.prompt_tokens == whole.usage.prompt_tokens


def test_n_choices_on_text_completions_whole_and_streamed(api):
    client = api.openai()
    asked = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 5, "temperature": 1.5, "seed": 3, "n": 2}
    whole = client.completions.create(**asked)
    assert [c.index for c in whole.choices] == [0, 1] and whole.choices[0].text != whole.choices[1].text
    assert whole.usage.completion_tokens == 10
    streamed = defaultdict(str)
    for chunk in client.completions.create(stream=True, **asked):
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
    assert dict(streamed) == {0: whole.choices[0].text, 1: whole.choices[1].text}


def test_a_client_that_leaves_ends_every_choice(api):
    client = api.openai()
    stream = client.chat.completions.create(model="tiny", messages=HI, max_tokens=1000, n=3, stream=True)
    chunks = iter(stream)
    next(chunks), next(chunks), next(chunks), next(chunks)
    stream.close()
    assert api.wait_for(lambda: any(r.status == 499 for r in api.finished_records("chat.completions")), 60)
    left = next(r for r in api.finished_records("chat.completions") if r.status == 499)
    assert (left.completion_tokens or 0) < 3000  # the choices after it never ran to their end
    after = client.chat.completions.create(model="tiny", messages=HI, max_tokens=2)  # the engine is free again
    assert after.usage.completion_tokens == 2


def test_n_without_a_seed_gives_each_choice_its_own(api):
    choices = api.openai().chat.completions.create(model="tiny", messages=HI, max_tokens=8, temperature=1.5, n=3)
    assert len({c.message.content for c in choices.choices}) > 1


@pytest.mark.parametrize("n", [9, 0])
def test_n_out_of_bounds_is_400_naming_the_field(api, n):
    with pytest.raises(openai.BadRequestError) as refused:
        api.openai().chat.completions.create(model="tiny", messages=HI, max_tokens=2, n=n)
    assert refused.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as text:
        api.openai().completions.create(model="tiny", prompt="x", max_tokens=2, n=n)
    assert text.value.body["param"] == "n"


def test_n_above_the_bound_says_the_bound(api):
    with pytest.raises(openai.BadRequestError) as refused:
        api.openai().chat.completions.create(model="tiny", messages=HI, max_tokens=2, n=9)
    assert "at most 8 choices" in refused.value.message


# --- echo ---------------------------------------------------------------------------------------------------------
def test_echo_with_logprobs_and_no_tokens_scores_the_prompt(api, gemma):
    """lm-evaluation-harness's loglikelihood request: the prompt back, its tokens' logprobs (the first null)."""
    scored = api.openai().completions.create(model=gemma, prompt=PROMPT, echo=True, logprobs=2, max_tokens=0)
    choice = scored.choices[0]
    assert choice.text == PROMPT and choice.finish_reason == "length"
    lp = choice.logprobs
    assert "".join(lp.tokens) == PROMPT  # no BOS, no added space: the tokens concatenate to the prompt
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v <= 0 for v in lp.token_logprobs[1:]) and all(len(top) == 2 for top in lp.top_logprobs[1:])
    assert lp.text_offset[0] == 0 and lp.text_offset[-1] == len(PROMPT) - len(lp.tokens[-1])
    assert scored.usage.completion_tokens == 0 and scored.usage.prompt_tokens == len(lp.tokens) + 1  # + BOS
    plain = api.openai().completions.create(model=gemma, prompt=PROMPT, max_tokens=1, temperature=0)
    assert plain.usage.prompt_tokens == scored.usage.prompt_tokens  # the same tokens the completion starts from


def test_echoed_logprobs_score_each_token_where_the_model_wrote_it(api, gemma):
    """A prompt token's logprob comes from the position before it (no off-by-one): the token the model wrote
    greedily after PROMPT is, echoed, the top choice at its place — lm-evaluation-harness's ``is_greedy`` check."""
    client = api.openai()
    written = client.completions.create(model=gemma, prompt=PROMPT, max_tokens=1, temperature=0, logprobs=1)
    token, logprob = written.choices[0].logprobs.tokens[0], written.choices[0].logprobs.token_logprobs[0]
    again = client.completions.create(model=gemma, prompt=PROMPT + token, echo=True, logprobs=1, max_tokens=0)
    lp = again.choices[0].logprobs
    assert lp.tokens[-1] == token and list(lp.top_logprobs[-1]) == [token]
    assert lp.token_logprobs[-1] == max(lp.top_logprobs[-1].values())
    assert abs(lp.token_logprobs[-1] - logprob) < 0.2  # llama.cpp's numbers move a little with the batch's size


def test_echo_then_a_completion_whole_and_streamed(api, gemma):
    client = api.openai()
    whole = client.completions.create(model=gemma, prompt=PROMPT, echo=True, max_tokens=3, temperature=0)
    text = whole.choices[0].text
    assert text.startswith(PROMPT) and len(text) > len(PROMPT) and whole.choices[0].logprobs is None
    plain = client.completions.create(model=gemma, prompt=PROMPT, max_tokens=3, temperature=0)
    assert text == PROMPT + plain.choices[0].text and whole.usage == plain.usage
    chunks = list(client.completions.create(model=gemma, prompt=PROMPT, echo=True, max_tokens=3, temperature=0,
                                            stream=True))  # fmt: skip
    assert chunks[0].choices[0].text == PROMPT and "".join(c.choices[0].text for c in chunks if c.choices) == text
    scored = client.completions.create(model=gemma, prompt=PROMPT, echo=True, logprobs=0, max_tokens=3,
                                       temperature=0)  # fmt: skip
    lp = scored.choices[0].logprobs
    assert scored.choices[0].text == text and "".join(lp.tokens) == text  # the prompt's tokens, then the reply's
    assert lp.token_logprobs[0] is None and all(v is not None for v in lp.token_logprobs[1:])
    assert len(lp.tokens) == scored.usage.prompt_tokens - 1 + scored.usage.completion_tokens  # no BOS


def test_echo_on_the_tiny_bpe_model_concatenates_too(api):
    prompt = "héllo wörld, tokens ✓"
    scored = api.openai().completions.create(model="tiny", prompt=prompt, echo=True, logprobs=1, max_tokens=0)
    lp = scored.choices[0].logprobs
    assert scored.choices[0].text == prompt and "".join(lp.tokens) == prompt and lp.token_logprobs[0] is None


def test_max_tokens_zero_needs_echo(api):
    with pytest.raises(openai.BadRequestError) as refused:
        api.openai().completions.create(model="tiny", prompt="x", max_tokens=0)
    assert refused.value.body["param"] == "max_tokens" and "echo" in refused.value.message
    with pytest.raises(openai.BadRequestError):
        api.openai().chat.completions.create(model="tiny", messages=HI, max_tokens=0)


def test_echo_on_an_ollama_model_is_400(tmp_path):
    with FakeOllama() as ollama:
        ollama.add_model("llama3.2:latest")
        lister = ollama_lister(SharedOllama(lambda: ollama.host))
        with ApiHarness(None, ServerConfig(port=0), list_ollama=lister, ollama_host=ollama.host) as api:
            with pytest.raises(openai.BadRequestError) as refused:
                api.openai().completions.create(model="llama3.2", prompt="x", echo=True, max_tokens=2)
            assert refused.value.body["param"] == "echo" and "Ollama" in refused.value.message
            assert not ollama.requests_to("/api/generate") and not ollama.requests_to("/api/chat")


# --- vLLM: the choices side by side, echo passed through -----------------------------------------------------------
@pytest.fixture(scope="module")
def vllm():
    with FakeOpenAIServer(models=("tiny-llama",)) as fake:
        yield fake


@pytest.fixture(scope="module")
def vllm_api(vllm):
    with ApiHarness(None, ServerConfig(port=0)) as harness:
        harness.offer_vllm(VllmEndpoint(vllm.base_url, "tiny-llama", None, "remote"))
        yield harness


def test_n_on_vllm_runs_the_choices_side_by_side(vllm_api, vllm):
    vllm.overlap = 3  # the fake holds every stream until three generate at once (30 s at most)
    try:
        before = len(vllm.requests_to("/v1/chat/completions"))
        reply = vllm_api.openai().chat.completions.create(model="tiny-llama", messages=HI, max_tokens=20, n=3, seed=5)
        sent = vllm.requests_to("/v1/chat/completions")[before:]
        assert vllm.max_in_flight >= 3 and sorted(r.json["seed"] for r in sent) == [5, 6, 7]
        assert [c.index for c in reply.choices] == [0, 1, 2]
        assert {c.message.content for c in reply.choices} == {"You said: hello there"}
        assert reply.usage.completion_tokens == 3 * 4  # "You said: hello there": four words, one token each
        texts = defaultdict(str)
        stream = vllm_api.openai().chat.completions.create(model="tiny-llama", messages=HI, max_tokens=20, n=3,
                                                           stream=True)  # fmt: skip
        for chunk in stream:
            for choice in chunk.choices:
                texts[choice.index] += choice.delta.content or ""
        assert dict(texts) == {i: "You said: hello there" for i in range(3)}
    finally:
        vllm.overlap = 0


def test_echo_reaches_vllm_as_its_own_field(vllm_api, vllm):
    vllm_api.openai().completions.create(model="tiny-llama", prompt="hello there", echo=True, max_tokens=0, logprobs=1)
    sent = vllm.requests_to("/v1/completions")[-1].json
    assert sent["echo"] is True and sent["max_tokens"] == 0 and sent["logprobs"] == 1


@pytest.mark.slow
@pytest.mark.timeout(900)  # the session's vLLM server may start here (minutes on 2 cores)
def test_n_and_echo_on_the_real_vllm_server(vllm_server):
    with ApiHarness(None, ServerConfig(port=0)) as api:
        endpoint = VllmEndpoint(vllm_server.base_url, vllm_server.served_model_name, vllm_server.api_key, "remote")
        api.offer_vllm(endpoint)
        model, client = vllm_server.served_model_name, api.openai()
        two = client.completions.create(model=model, prompt="hello there", max_tokens=6, temperature=1.0, seed=1, n=2)
        assert [c.index for c in two.choices] == [0, 1] and two.usage.completion_tokens >= 2
        prompt = "hello there, how are you"
        scored = client.completions.create(model=model, prompt=prompt, echo=True, logprobs=1, max_tokens=0)
        lp = scored.choices[0].logprobs
        assert scored.choices[0].text == prompt and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert len(lp.tokens) == scored.usage.prompt_tokens and all(v <= 0 for v in lp.token_logprobs[1:])
        streamed = client.completions.create(model=model, prompt=prompt, echo=True, max_tokens=3, stream=True)
        assert "".join(c.choices[0].text for c in streamed if c.choices).startswith(prompt)
