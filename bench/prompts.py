"""Prompts the benchmarks share."""

# About 480 tokens (one batch of 512) with Gemma 3's tokenizer, as llama-bench's pp512; the
# round number comes first, so a later round's prompt shares no cached prefix.
LONG_PROMPT = (
    "Round {r}. "
    + " ".join(
        f"Note {i}: the history of the printing press begins in the fifteenth century, when metal "
        "movable type, oil-based inks and a screw press came together in one workshop."
        for i in range(13)
    )
    + " Describe in detail how the invention spread across Europe and what it changed:"
)
