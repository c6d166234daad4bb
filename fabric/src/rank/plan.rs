//! Planning a round's posts: an op split into pieces no larger than a
//! transfer, and delivery-complete writes to one peer grouped into scatter
//! writes of up to [`MAX_SCATTER`] segments. Pure: it posts nothing.

use crate::error::Result;
use fabkit_core::OpKind;

/// Most writes one scatter write carries (the provider's `rma_iov_limit`
/// and `iov_limit` may allow fewer; `shm` allows 4).
pub(super) const MAX_SCATTER: usize = 4;

/// One piece of an op as posted: RMA ops larger than a transfer are split.
#[derive(Clone, Copy, Debug)]
pub(super) struct Piece {
    pub(super) op: usize,
    pub(super) kind: OpKind,
    pub(super) peer: usize,
    pub(super) offset: u64,
    pub(super) len: usize,
    /// Offset of this piece within the op's user buffer.
    pub(super) user_off: usize,
    /// Offset in the staging buffer.
    pub(super) stage_off: usize,
    /// A write that asks for delivery completion.
    pub(super) delivery: bool,
    /// A read of the write piece planned just before it, which makes that
    /// write visible ([`Ordering::ReadBack`](crate::Ordering::ReadBack)); nothing reaches the caller.
    pub(super) read_back: bool,
}

/// Pieces posted as one operation: one piece, or up to [`MAX_SCATTER`]
/// delivery-complete writes to one peer as a scatter write. Indexes into
/// the round; the first is the lead, whose kind and peer the post has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Post {
    pub(super) pieces: [u32; MAX_SCATTER],
    pub(super) n: u8,
}

impl Post {
    pub(super) fn one(i: usize) -> Post {
        Post {
            pieces: [i as u32, 0, 0, 0],
            n: 1,
        }
    }

    pub(super) fn members(&self) -> &[u32] {
        &self.pieces[..self.n as usize]
    }

    pub(super) fn lead(&self) -> usize {
        self.pieces[0] as usize
    }
}

/// Plans a round's posts: every piece alone, except the pieces `joins`
/// admits (delivery-complete writes), which join the open group of their
/// peer until it holds `scatter` of them or `max_len` bytes. A group is
/// posted where its first piece stood; ops in a batch are unordered, and
/// only writes of a mechanism that needs no per-peer order (delivery
/// completion: no read-back after them, no fence before) are joined.
pub(super) fn plan_posts(
    round: &[Piece],
    scatter: usize,
    max_len: usize,
    joins: impl Fn(&Piece) -> bool,
) -> Vec<Post> {
    let scatter = scatter.clamp(1, MAX_SCATTER);
    let mut posts: Vec<Post> = Vec::with_capacity(round.len());
    // Open groups: (peer, post index, bytes so far); one per peer at most.
    let mut open: Vec<(usize, usize, usize)> = Vec::new();
    for (i, p) in round.iter().enumerate() {
        if scatter == 1 || !joins(p) {
            posts.push(Post::one(i));
            continue;
        }
        match open.iter().position(|&(peer, _, _)| peer == p.peer) {
            Some(g) if open[g].2 + p.len <= max_len => {
                let (_, at, bytes) = &mut open[g];
                let post = &mut posts[*at];
                post.pieces[post.n as usize] = i as u32;
                post.n += 1;
                *bytes += p.len;
                if post.n as usize == scatter {
                    open.swap_remove(g);
                }
            }
            found => {
                if let Some(g) = found {
                    open.swap_remove(g);
                }
                posts.push(Post::one(i));
                if scatter > 1 {
                    open.push((p.peer, posts.len() - 1, p.len));
                }
            }
        }
    }
    posts
}

/// One pass over the posts still to be made (`queue`, in order): each is
/// tried with `post` (true: posted) unless an earlier one of its key (its
/// peer) was refused in this pass; the refused and the held back stay in
/// `queue`, in order. `held` is scratch space.
pub(super) fn posting_pass(
    queue: &mut Vec<usize>,
    held: &mut Vec<usize>,
    key: impl Fn(usize) -> usize,
    mut post: impl FnMut(usize) -> Result<bool>,
) -> Result<()> {
    held.clear();
    let mut left = 0;
    for q in 0..queue.len() {
        let i = queue[q];
        let k = key(i);
        if held.contains(&k) || !post(i)? {
            if !held.contains(&k) {
                held.push(k);
            }
            queue[left] = i;
            left += 1;
        }
    }
    queue.truncate(left);
    Ok(())
}
