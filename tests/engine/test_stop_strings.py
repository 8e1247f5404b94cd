from pocketcli.engine.stop_strings import StopStringMatcher


def feed_all(matcher, pieces):
    out, stopped = "", False
    for piece in pieces:
        text, stopped = matcher.feed(piece)
        out += text
        if stopped:
            return out, True
    return out + matcher.flush(), False


def test_no_stop_strings_passes_through():
    assert feed_all(StopStringMatcher([]), ["ab", "c"]) == ("abc", False)


def test_stop_string_split_across_pieces_is_cut():
    assert feed_all(StopStringMatcher(["END"]), ["hello E", "N", "D tail"]) == ("hello ", True)


def test_partial_prefix_is_held_back_then_released():
    matcher = StopStringMatcher(["###"])
    assert matcher.feed("a#") == ("a", False)
    assert matcher.feed("b") == ("#b", False)


def test_earliest_of_several_stop_strings_wins():
    assert feed_all(StopStringMatcher(["zz", "x"]), ["12x34zz"]) == ("12", True)
