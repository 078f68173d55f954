//! Hostile inputs to the parts of the public API that run on the host alone (issue 21): counts
//! that would need more memory than any machine has, and parsers of user bytes (memory tables,
//! snapshots) fed random, mutated and extreme JSON. Each answer is a value or a typed error,
//! never a panic, an abort or an allocation the input alone sizes.

use gpu_arena::shard_rows;

#[test]
fn shard_rows_answers_any_count_of_shards_without_allocating_or_panicking() {
    // Before: "capacity overflow" for usize::MAX shards and an abort (16 TiB) for 2^40.
    let all = shard_rows(3, usize::MAX);
    assert_eq!(all.len(), usize::MAX);
    assert_eq!(all.get(0), Some(0..1));
    assert_eq!(all.get(2), Some(2..3));
    assert_eq!(all.get(3), Some(3..3));
    assert_eq!(all.get(usize::MAX - 1), Some(3..3));
    assert_eq!(all.get(usize::MAX), None);
    assert_eq!(all.clone().last(), Some(3..3));
    assert_eq!(
        all.clone().take(4).collect::<Vec<_>>(),
        [0..1, 1..2, 2..3, 3..3]
    );
    let mut many = shard_rows(3, 1 << 40);
    assert_eq!(many.len(), 1 << 40);
    assert_eq!(many.nth((1 << 40) - 2), Some(3..3));
    assert_eq!(many.len(), 1);
    assert_eq!(many.next(), Some(3..3));
    assert_eq!(many.next(), None);
    assert_eq!(many.len(), 0);
    // The largest counts of rows split exactly, the first shards one row longer.
    let rows = shard_rows(usize::MAX, 2);
    assert_eq!(
        rows,
        [0..usize::MAX / 2 + 1, usize::MAX / 2 + 1..usize::MAX]
    );
    let rows = shard_rows(usize::MAX, usize::MAX);
    assert_eq!(rows.get(usize::MAX - 1), Some(usize::MAX - 1..usize::MAX));
    assert_eq!(shard_rows(usize::MAX, 0).len(), 0);
}

#[test]
fn shard_rows_iterates_the_same_ranges_from_either_end_and_by_index() {
    for rows in 0..30 {
        for shards in 0..8 {
            let forward: Vec<_> = shard_rows(rows, shards).collect();
            let mut backward: Vec<_> = shard_rows(rows, shards).rev().collect();
            backward.reverse();
            let by_index: Vec<_> = (0..shards)
                .map(|i| shard_rows(rows, shards).get(i).unwrap())
                .collect();
            assert_eq!(forward, backward);
            assert_eq!(forward, by_index);
            assert_eq!(shard_rows(rows, shards), forward);
            assert_eq!(forward.iter().map(|r| r.len()).sum::<usize>(), rows);
        }
    }
}
