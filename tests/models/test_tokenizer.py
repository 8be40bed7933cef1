"""Tokenizer trained on game text: byte-level coverage and one token per action."""

from coplay.models.tokenizer import MAX_ACTION_TOKENS, train_tokenizer

CORPUS = ["Your card: K.\nYour legal actions: [Pass] [Bet]\n"] * 30


def test_special_token_ids_are_fixed():
    tok = train_tokenizer(CORPUS, vocab_size=300)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)


def test_actions_become_single_tokens_after_a_space():
    tok = train_tokenizer(CORPUS, vocab_size=300, actions=["[Pass]", "[Bet]"])
    for action in ("[Pass]", "[Bet]"):
        assert len(tok(" " + action, add_special_tokens=False)["input_ids"]) == 1


def test_any_text_round_trips():
    tok = train_tokenizer(CORPUS, vocab_size=300, actions=["[Bet]"])
    text = "Ünïcode ♠ and [Bet] and [bet] 123"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_too_many_actions_keep_subword_pieces():
    actions = [f"[{i}]" for i in range(MAX_ACTION_TOKENS + 1)]
    tok = train_tokenizer(CORPUS, vocab_size=300, actions=actions)
    assert len(tok(" [7]", add_special_tokens=False)["input_ids"]) > 1
