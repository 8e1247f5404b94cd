"""Chat templates used when a GGUF file carries none, by architecture family."""

GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}")

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")

LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}")

LLAMA2_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{ bos_token + '[INST] ' + (system if loop.first else '') + message['content'] | trim + ' [/INST]' }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{ ' ' + message['content'] | trim + ' ' + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}")

# architecture (general.architecture) -> template family
FAMILY_OF_ARCH = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma",
                  "qwen2": "chatml", "qwen3": "chatml", "qwen2moe": "chatml", "qwen3moe": "chatml",
                  "llama": "llama"}
TEMPLATE_OF_FAMILY = {"gemma": GEMMA_TEMPLATE, "chatml": CHATML_TEMPLATE, "llama3": LLAMA3_TEMPLATE,
                      "llama2": LLAMA2_TEMPLATE}
