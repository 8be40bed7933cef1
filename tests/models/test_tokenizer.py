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


def test_the_choice_tokenizer_stays_as_it_was():
    tok = train_tokenizer(CORPUS, vocab_size=300, actions=["[Bet]"])
    assert not tok.chat_template and "<think>" not in tok.get_vocab()


def test_the_text_tokenizer_writes_the_format_and_words_in_few_tokens():
    tok = train_tokenizer(CORPUS, vocab_size=400, actions=["[Pass]", "[Bet]"], text=True)
    answer = "<think>I have a strong card, so I bet.</think> [Bet]"
    ids = tok(answer, add_special_tokens=False)["input_ids"]
    pieces = [tok.decode([i]) for i in ids]
    assert pieces[0] == "<think>" and "</think>" in pieces and pieces[-1] == " [Bet]"
    assert " strong" in pieces and " card" in pieces  # ordinary words are single tokens
    # the reasoning tags are not special: decoding keeps them for the parser
    assert tok.decode(ids, skip_special_tokens=True) == answer
    boxed = tok("\\boxed{Bet}", add_special_tokens=False)["input_ids"]
    assert tok.decode(boxed[:1]) == "\\boxed{"


def test_the_text_tokenizer_has_a_chat_template_closing_answers_with_eos():
    tok = train_tokenizer(CORPUS, vocab_size=400, text=True)
    messages = [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "Your card: K."},
        {"role": "assistant", "content": "[Bet]"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == "<|system|>\nRules.\n<|user|>\nYour card: K.\n<|assistant|>\n[Bet]<eos>\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.convert_tokens_to_ids("<|user|>") in ids and tok.eos_token_id in ids


def test_the_same_text_and_actions_give_the_same_ids_in_any_order():
    # Wherever a run builds the tiny model it trains the tokenizer from the game's text:
    # the ids must not depend on the order the actions come in.
    a = train_tokenizer(CORPUS, vocab_size=400, actions=["[Pass]", "[Bet]"], text=True)
    b = train_tokenizer(CORPUS, vocab_size=400, actions=["[Bet]", "[Pass]", "[Bet]"], text=True)
    assert a.get_vocab() == b.get_vocab()
    text = "<|user|>\nYour card: K. [Pass] [Bet]<eos>"
    assert (
        a(text, add_special_tokens=False)["input_ids"]
        == b(text, add_special_tokens=False)["input_ids"]
    )
