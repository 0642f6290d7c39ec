use textstats::{average_word_length, median_word_length, most_common_word, word_count, words};

#[test]
fn words_are_normalised() {
    assert_eq!(words("Hello, world! -- Hello?"), vec!["hello", "world", "hello"]);
}

#[test]
fn counts_words() {
    assert_eq!(word_count("the quick brown fox"), 4);
    assert_eq!(word_count("   "), 0);
}

#[test]
fn average_length() {
    assert_eq!(average_word_length("a bb ccc"), Some(2.0));
    assert_eq!(average_word_length(""), None);
}

#[test]
fn median_length_odd() {
    assert_eq!(median_word_length("a bbb cc"), Some(2.0));
}

#[test]
fn median_length_even() {
    // Lengths 1, 2, 3, 4: the median is the mean of 2 and 3.
    assert_eq!(median_word_length("a bb ccc dddd"), Some(2.5));
}

#[test]
fn most_common() {
    assert_eq!(
        most_common_word("the cat and the hat and the bat"),
        Some(("the".to_string(), 3))
    );
    // Ties go to the alphabetically first word.
    assert_eq!(most_common_word("b a"), Some(("a".to_string(), 1)));
    assert_eq!(most_common_word(""), None);
}
