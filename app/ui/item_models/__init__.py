"""Qt item models: the chat list, the conversation on screen, the installed models."""

from .chat_list import ChatListModel
from .conversation import ConversationModel, MessageItem
from .model_list import ModelListModel, ModelRow

__all__ = ["ChatListModel", "ConversationModel", "MessageItem", "ModelListModel", "ModelRow"]
