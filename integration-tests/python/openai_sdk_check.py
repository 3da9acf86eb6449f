"""The official openai Python SDK against a canopy router: chat (whole and streamed), completions
and models, asserting on the objects the SDK parses. Exits non-zero on the first failure.

Usage: openai_sdk_check.py BASE_URL MODEL_ID   (BASE_URL like http://127.0.0.1:8000/v1)
"""

import sys

import openai


def check_models(client, model_id):
    models = client.models.list()
    ids = [model.id for model in models.data]
    assert ids == [model_id], ids
    model = client.models.retrieve(model_id)
    assert model.id == model_id and model.object == "model", model
    try:
        client.models.retrieve("no-such-model")
    except openai.NotFoundError as error:
        assert error.status_code == 404, error
    else:
        raise AssertionError("an unknown model must raise NotFoundError")


def chat_request(model_id, **overrides):
    request = dict(
        model=model_id,
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Write a haiku about trees."},
        ],
        max_tokens=10,
        temperature=0,
        seed=7,
        extra_body={"ignore_eos": True},
    )
    request.update(overrides)
    return request


def check_chat(client, model_id):
    completion = client.chat.completions.create(**chat_request(model_id))
    assert completion.object == "chat.completion", completion
    assert completion.id.startswith("chatcmpl-"), completion.id
    assert completion.model == model_id, completion.model
    assert len(completion.choices) == 1, completion.choices
    choice = completion.choices[0]
    assert choice.index == 0 and choice.finish_reason == "length", choice
    assert choice.message.role == "assistant", choice.message
    assert isinstance(choice.message.content, str) and choice.message.content, choice.message
    usage = completion.usage
    assert usage.completion_tokens == 10, usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage

    stream = client.chat.completions.create(
        **chat_request(model_id, stream=True, stream_options={"include_usage": True})
    )
    text, finish_reasons, stream_usage = [], [], None
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk", chunk
        if chunk.usage is not None:
            stream_usage = chunk.usage
        for delta_choice in chunk.choices:
            if delta_choice.delta.content:
                text.append(delta_choice.delta.content)
            if delta_choice.finish_reason:
                finish_reasons.append(delta_choice.finish_reason)
    assert "".join(text) == choice.message.content, (text, choice.message.content)
    assert finish_reasons == ["length"], finish_reasons
    assert stream_usage is not None and stream_usage.completion_tokens == 10, stream_usage

    try:
        client.chat.completions.create(**chat_request(model_id, temperature=-1))
    except openai.BadRequestError as error:
        assert error.status_code == 400, error
        assert error.body["param"] == "temperature", error.body
    else:
        raise AssertionError("a negative temperature must raise BadRequestError")


def check_completions(client, model_id):
    request = dict(
        model=model_id, prompt="Once upon a time", max_tokens=5, temperature=0,
        extra_body={"ignore_eos": True},
    )
    completion = client.completions.create(**request)
    assert completion.object == "text_completion", completion
    assert completion.model == model_id, completion
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and choice.text, choice
    assert completion.usage.completion_tokens == 5, completion.usage

    streamed = "".join(
        chunk.choices[0].text for chunk in client.completions.create(**request, stream=True) if chunk.choices
    )
    assert streamed == choice.text, (streamed, choice.text)


def main():
    base_url, model_id = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
    check_models(client, model_id)
    check_chat(client, model_id)
    check_completions(client, model_id)
    print(f"openai {openai.__version__}: models, chat (whole and streamed) and completions all as expected")


if __name__ == "__main__":
    main()
