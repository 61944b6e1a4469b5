# Sources of the model layer, relative to libagentd/.
set(AGENTD_MODEL_SOURCES
  src/models/model_config.cpp
  src/models/model_registry.cpp
  src/models/http_client.cpp
  src/models/http_chat_model.cpp
  src/models/echo_model.cpp
  src/models/openai_chat_model.cpp
  src/models/ollama_chat_model.cpp
  src/models/dashscope_chat_model.cpp
  src/models/post_api_chat_model.cpp
)
