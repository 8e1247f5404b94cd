"""reasoning_content against a real server started with a think-tag reasoning parser."""
import re

THINKING = r"<think>[a-z]{2,5}</think>[a-z]{2,5}"  # the tiny base model writes think tags only when made to
ASK = [{"role": "user", "content": "Think, then answer."}]


def test_reasoning_split_whole_and_streamed(reasoning_client, model_name):
    kwargs = dict(model=model_name, messages=ASK, max_tokens=16, temperature=0,
                  extra_body={"guided_regex": THINKING})
    message = reasoning_client.chat.completions.create(**kwargs).choices[0].message
    assert re.fullmatch("[a-z]{2,5}", message.reasoning_content) and re.fullmatch("[a-z]{2,5}", message.content)
    reasoning, content = "", ""
    for chunk in reasoning_client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
            content += choice.delta.content or ""
    assert (reasoning, content) == (message.reasoning_content, message.content)

