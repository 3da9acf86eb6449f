// Paged multi-sequence attention. Decode attention is bound by reading the keys and values, and
// under grouped-query attention the G query heads of a group all read the same KV head. So a block
// serves the query heads of one KV head, a warp each (a group larger than ATTENTION_WARPS is cut
// into even chunks, a block each), and reads each key and value row once for all of them instead
// of once per query head. A group that leaves warps over takes as many consecutive query rows of
// one sequence as fit (rows_per_block): the rows of a verify batch share their context, and each
// key and value row read then serves all of them.
//
// The block walks its keys in tiles. All its threads copy a tile's key and value rows (f16 in the
// pools) into shared memory as f32, consecutive threads reading consecutive groups of four halves
// (single halves when head_dim is no multiple of 4) of a row, so the reads coalesce; each thread
// has its share of the next tile in flight while the warps work on the current one, so that
// memory stays busy through the arithmetic. Each warp folds the tile into its query head's online
// softmax: lane t scores key t from its key row in shared memory (the rows are padded so that 32
// lanes reading 32 rows hit distinct banks), one warp reduction gives the tile's maximum and one
// its sum, and the lanes, over dimensions (lane l holds dimensions l, l + 32, ...), add the
// weighted value rows. The block fetches every key below the end of its last row (all written:
// the context and this step's new tokens) and stores the rest of the tile as zeros; keys a warp's
// row may not see weigh nothing.
//
// A tile holds 32 keys, one per lane, or fewer for large heads (the host picks the count), so that
// the queries and a tile fit in 48 KB, which every device grants without opting in, and
// TILE_LOADS loads a thread cover a tile. Heads of up to 128 dimensions, those of most models,
// take a variant holding 4 dimensions a lane, which leaves registers for four blocks per SM.
//
// When rows x KV heads alone would leave most SMs idle (decode), each task (row, KV head, chunk)
// gets up to n_splits blocks (a short row fewer, so that no block is left with next to nothing to
// read), each taking an even share of the row's tiles. Each block writes one state
// per query head (max, sum, unnormalised output) to `partials` and counts itself done on the
// task's counter, and the block that finishes last merges the states. Merging there rather than
// in a second kernel saves a launch per layer on every decode step; since no block waits for
// another, it holds however the blocks are scheduled. The last block puts the counter back to
// zero, so every launch, and every replay of a recorded graph, starts from zeroed counters.
//
// The keys a row sees are the committed context, then the new tokens its mask allows. The batch
// description is the flattened AttentionLayout: per sequence the five fields
// (q_start, n_new, n_past, table_start, mask), the concatenated block tables, and per query row
// its tree parent (index among its sequence's new tokens, or TREE_ROOT).

#define ATTENTION_WARPS 8
#define MAX_HEAD_DIM 512
// The largest head of the variant that holds 4 dimensions a lane.
#define SMALL_HEAD_DIM 128
// Elements of a tile each thread copies, of keys and of values each.
#define TILE_LOADS 4
// Tiles each split of a row reads at least. Measured on Qwen3-8B decode (H200): 2, 4 or 8 were
// slower than 1 at context depths 0 and 4096, merging costing less than a longer walk.
#define MIN_SPLIT_TILES 1
#define SEQ_FIELDS 5
#define MASK_CAUSAL 0
#define MASK_BIDIRECTIONAL 1
#define MASK_TREE 2
#define TREE_ROOT 0xffffffffu

// One query row's view of its sequence: which keys it sees and where they are in the pools.
struct KeyRange {
    const u32 *table;
    const u32 *parents;
    FastDivisor block_size;
    u32 n_past;
    u32 n_new;
    // The row's index among its sequence's new tokens.
    u32 i;
    u32 mask;
    // Keys at or past `end` are never visible: a causal row stops at itself.
    u32 end;
    // Elements per pool row, and the offset of the block's KV head in one.
    size_t kv_row_len;
    size_t kv_offset;
};

// One query head's online softmax, as each lane of its warp holds it, for heads of up to
// DIMS * 32 dimensions.
template <int DIMS>
struct HeadState {
    float max;
    float sum;
    // Dimensions lane, lane + 32, ... of the unnormalised output.
    float acc[DIMS];
};

// A block's queries and its current tile in shared memory: the chunk's query rows
// (heads_per_block x head_dim), the tile's key rows (n_keys x key_stride, key_stride a multiple of
// 4 when head_dim is) and its value rows (n_keys x head_dim).
struct Tiles {
    float *q_rows;
    float *k_rows;
    float *v_rows;
    u32 n_keys;
    u32 key_stride;
    u32 head_dim;
};

// The keys that query row `i` of sequence `seq` (its index among the sequence's new tokens) sees,
// for the KV head whose elements start at kv_offset in each pool row.
__device__ KeyRange keys_of_row(const u32 *seq, const u32 *block_tables, const u32 *tree_parents,
                                 FastDivisor block_size, u32 i, size_t kv_row_len, size_t kv_offset) {
    KeyRange keys;
    keys.table = block_tables + seq[3];
    keys.parents = tree_parents + seq[0];
    keys.block_size = block_size;
    keys.n_past = seq[2];
    keys.n_new = seq[1];
    keys.i = i;
    keys.mask = seq[4];
    keys.end = keys.n_past + (keys.mask == MASK_CAUSAL ? min(i + 1, keys.n_new) : keys.n_new);
    keys.kv_row_len = kv_row_len;
    keys.kv_offset = kv_offset;
    return keys;
}

// Whether new token j is node i itself or one of its ancestors. The walk is bounded, so a
// malformed parent array cannot loop.
__device__ bool tree_sees(const u32 *parents, u32 n_new, u32 i, u32 j) {
    u32 node = i;
    for (u32 steps = 0; node != TREE_ROOT && node < n_new && steps <= n_new; ++steps) {
        if (node == j) {
            return true;
        }
        node = parents[node];
    }
    return false;
}

__device__ bool row_sees(const KeyRange &keys, u32 p) {
    if (p >= keys.end) {
        return false;
    }
    return p < keys.n_past || keys.mask != MASK_TREE ||
           tree_sees(keys.parents, keys.n_new, keys.i, p - keys.n_past);
}

// The pool slot of position p of a sequence whose block table is `table`.
__device__ __forceinline__ size_t pool_slot(const u32 *table, u32 p, FastDivisor block_size) {
    const u32 block = fast_divide(p, block_size);
    return (size_t)table[block] * block_size.divisor + (p - block * block_size.divisor);
}

// The offset in the pools of key p's row for the block's KV head, if p is below the end of the
// row `keys` describes (the block's last). Keys past it may lie past the sequence's block table,
// so they have no offset.
__device__ bool key_offset(const KeyRange &keys, u32 p, size_t *at) {
    if (p >= keys.end) {
        return false;
    }
    *at = pool_slot(keys.table, p, keys.block_size) * keys.kv_row_len + keys.kv_offset;
    return true;
}

// The pools' f16 values as the tiles load them: `Raw` holds the halves of one element E of a tile
// in shared memory (f32), and `widen` converts it. The tiles stay f32 so that the per-key work,
// which bounds these kernels more than their reads, needs no conversions.
template <typename E>
struct PoolElement;

template <>
struct PoolElement<float4> {
    typedef uint2 Raw;
    static __device__ __forceinline__ float4 widen(uint2 raw) {
        return make_float4(f16_bits_to_f32(raw.x & 0xffffu), f16_bits_to_f32(raw.x >> 16),
                           f16_bits_to_f32(raw.y & 0xffffu), f16_bits_to_f32(raw.y >> 16));
    }
};

template <>
struct PoolElement<float> {
    typedef u16 Raw;
    static __device__ __forceinline__ float widen(u16 raw) { return f16_bits_to_f32(raw); }
};

// One thread's share of a tile's key and value rows, in elements of type E (float4, or float when
// head_dim is no multiple of 4), as loaded from the pools: elements e = threadIdx.x + j * blockDim.x
// of the tile, numbered row after row, row_len to a row. The host sizes tiles so that TILE_LOADS
// elements a thread cover them.
template <typename E>
struct TileShare {
    typename PoolElement<E>::Raw k[TILE_LOADS];
    typename PoolElement<E>::Raw v[TILE_LOADS];
};

// Where a thread's elements lie in every tile: element j is column `col` of key row `key` of the
// tile (a row of the tile while key < n_keys), packed as key << 16 | col. The same in every tile,
// so the divisions are done once a block, and packed they cost the tile loop 4 registers.
struct TileSlots {
    u32 packed[TILE_LOADS];
    __device__ u32 key(int j) const { return packed[j] >> 16; }
    __device__ u32 col(int j) const { return packed[j] & 0xffffu; }
};

// Rows are at most MAX_HEAD_DIM elements and tiles at most WARP_SIZE keys, far below 2^16.
__device__ TileSlots tile_slots(u32 row_len) {
    TileSlots slots;
#pragma unroll
    for (int j = 0; j < TILE_LOADS; ++j) {
        const u32 e = threadIdx.x + j * blockDim.x;
        slots.packed[j] = (e / row_len) << 16 | e % row_len;
    }
    return slots;
}

// Loads this thread's share of the tile from position first_key. The loads do not wait on one
// another, and consecutive threads read consecutive elements of a row. Rows past the end of the
// block's last row are zeros.
template <typename E>
__device__ void fetch_tile(TileShare<E> &share, const u16 *k_pool, const u16 *v_pool, const KeyRange &keys,
                           u32 first_key, u32 n_keys, const TileSlots &slots) {
    typedef typename PoolElement<E>::Raw Raw;
#pragma unroll
    for (int j = 0; j < TILE_LOADS; ++j) {
        share.k[j] = Raw{};
        share.v[j] = Raw{};
        size_t at = 0;
        if (slots.key(j) < n_keys && key_offset(keys, first_key + slots.key(j), &at)) {
            share.k[j] = ((const Raw *)(k_pool + at))[slots.col(j)];
            share.v[j] = ((const Raw *)(v_pool + at))[slots.col(j)];
        }
    }
}

// Stores this thread's share of a tile in shared memory, as f32: key rows key_stride elements
// apart, value rows packed.
template <typename E>
__device__ void store_tile(const TileShare<E> &share, const TileSlots &slots, u32 n_keys, u32 key_stride,
                           E *k_tile, E *v_tile) {
#pragma unroll
    for (int j = 0; j < TILE_LOADS; ++j) {
        if (slots.key(j) < n_keys) {
            k_tile[slots.key(j) * key_stride + slots.col(j)] = PoolElement<E>::widen(share.k[j]);
            v_tile[threadIdx.x + j * blockDim.x] = PoolElement<E>::widen(share.v[j]);
        }
    }
}

// q . k over head_dim floats in shared memory; both rows are 16-byte aligned when head_dim is a
// multiple of 4.
__device__ float dot_row(const float *q, const float *k, u32 head_dim) {
    float sum = 0.0f;
    if (head_dim % 4 == 0) {
#pragma unroll 8
        for (u32 d = 0; d < head_dim; d += 4) {
            const float4 qv = *(const float4 *)(q + d);
            const float4 kv = *(const float4 *)(k + d);
            sum += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
        }
    } else {
        for (u32 d = 0; d < head_dim; ++d) {
            sum += q[d] * k[d];
        }
    }
    return sum;
}

// Folds a tile of n_keys keys, starting at position first_key, into one query head's softmax. The
// whole warp calls it: lane t scores key t, then every lane adds the weighted value rows over its
// dimensions.
template <int DIMS>
__device__ void attend_tile(HeadState<DIMS> &state, const float *q, const Tiles &tiles,
                            const KeyRange &keys, u32 first_key, float scale) {
    const u32 n_keys = tiles.n_keys;
    const u32 head_dim = tiles.head_dim;
    const u32 lane = threadIdx.x % WARP_SIZE;
    const bool visible = lane < n_keys && row_sees(keys, first_key + lane);
    const float *k = tiles.k_rows + lane * tiles.key_stride;
    const float score = visible ? dot_row(q, k, head_dim) * scale : -INFINITY;
    const float tile_max = warp_max(score);
    if (tile_max == -INFINITY) {
        return;
    }
    const float new_max = fmaxf(state.max, tile_max);
    // expf(-inf) = 0 on the first tile, while the accumulators are still zero.
    const float rescale = expf(state.max - new_max);
    const float weight = visible ? expf(score - new_max) : 0.0f;
    state.sum = state.sum * rescale + warp_sum(weight);
    state.max = new_max;
#pragma unroll
    for (int j = 0; j < DIMS; ++j) {
        state.acc[j] *= rescale;
    }
#pragma unroll 4
    for (u32 t = 0; t < n_keys; ++t) {
        const float w = __shfl_sync(FULL_MASK, weight, t);
        const float *v = tiles.v_rows + t * head_dim;
#pragma unroll
        for (int j = 0; j < DIMS; ++j) {
            const u32 d = lane + j * WARP_SIZE;
            if (d < head_dim) {
                state.acc[j] = fmaf(w, v[d], state.acc[j]);
            }
        }
    }
}

// The query rows a block serves: `n_rows` rows of `n_heads` heads of head_dim floats from `first`
// (the first head of the block's chunk in its first row), rows `row_stride` floats apart.
struct BlockQueries {
    const float *first;
    size_t row_stride;
    u32 n_rows;
    u32 n_heads;
};

// Folds tiles first_tile .. last_tile of the block's keys (`fetch`, its last row's) into the
// softmax of each active warp's query head, over the keys its row sees (`own`; inactive warps only
// copy). While the warps work on one tile, the loads of the next are in flight. Every thread of
// the block calls it with the same tiles, so every thread reaches both barriers of each.
//
// Under programmatic dependent launch the kernel before (attention_inputs) lets this one start
// early. Keys and values of the committed context were written by earlier steps, so a first tile
// wholly inside it is fetched before waiting for that kernel; the queries, and the tiles holding
// the new tokens' keys and values, which it writes, are read after. In a decode batch the output
// projection may in turn start early (let_next_kernel_start).
template <typename E, int DIMS>
__device__ void attend_tiles(HeadState<DIMS> &state, const Tiles &tiles, const BlockQueries &queries,
                             const u16 *k_pool, const u16 *v_pool, const KeyRange &fetch, const KeyRange &own,
                             u32 first_tile, u32 last_tile, bool active, float scale, bool decode_batch) {
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 row_len = tiles.head_dim * sizeof(float) / sizeof(E);
    const u32 key_stride = tiles.key_stride * sizeof(float) / sizeof(E);
    const TileSlots slots = tile_slots(row_len);
    TileShare<E> share;
    const bool committed = first_tile < last_tile && (first_tile + 1) * tiles.n_keys <= fetch.n_past;
    if (committed) {
        fetch_tile(share, k_pool, v_pool, fetch, first_tile * tiles.n_keys, tiles.n_keys, slots);
    }
    wait_for_previous_kernel();
    if (decode_batch) {
        let_next_kernel_start();
    }
    const u32 row_floats = queries.n_heads * tiles.head_dim;
    for (u32 r = 0; r < queries.n_rows; ++r) {
        for (u32 x = threadIdx.x; x < row_floats; x += blockDim.x) {
            tiles.q_rows[r * row_floats + x] = queries.first[r * queries.row_stride + x];
        }
    }
    if (!committed && first_tile < last_tile) {
        fetch_tile(share, k_pool, v_pool, fetch, first_tile * tiles.n_keys, tiles.n_keys, slots);
    }
    for (u32 tile = first_tile; tile < last_tile; ++tile) {
        // The warps are done with the previous tile (and, the first time, the queries are written).
        __syncthreads();
        store_tile(share, slots, tiles.n_keys, key_stride, (E *)tiles.k_rows, (E *)tiles.v_rows);
        __syncthreads();
        if (tile + 1 < last_tile) {
            fetch_tile(share, k_pool, v_pool, fetch, (tile + 1) * tiles.n_keys, tiles.n_keys, slots);
        }
        if (active) {
            attend_tile(state, tiles.q_rows + warp * tiles.head_dim, tiles, own, tile * tiles.n_keys, scale);
        }
    }
}

// Writes a lane's dimensions of `acc`, times `factor`, to `dst`.
template <int DIMS>
__device__ void store_dims(const float *acc, float factor, float *dst, u32 head_dim) {
    const u32 lane = threadIdx.x % WARP_SIZE;
#pragma unroll
    for (int j = 0; j < DIMS; ++j) {
        const u32 d = lane + j * WARP_SIZE;
        if (d < head_dim) {
            dst[d] = acc[j] * factor;
        }
    }
}

// Where a head's output goes: the float row, and with `q` set (heads of whole Q8_BLOCKs), the
// int8 copy the output projection reads, which saves its quantize_q8 launch, and with `halves`
// set the f16 copy (mmq_f16.cu). `index` is the head's first element in the output. A row's first
// head also writes its f16 row scale, `half_scale`: 1, as outputs are averages of values, far
// below f16's limit.
struct HeadOutput {
    float *out;
    u8 *q;
    float2 *q_scales;
    u16 *halves;
    float *half_scale;
    size_t index;
};

// store_dims into `out`, plus the int8 copy. The 32 dimensions j * 32 .. j * 32 + 31 that the
// warp's lanes hold as acc[j] are one block of the copy, rounded as store_q8_quad rounds.
template <int DIMS>
__device__ void store_output(const float *acc, float factor, const HeadOutput &out, u32 head_dim) {
    store_dims<DIMS>(acc, factor, out.out + out.index, head_dim);
    if (out.q == NULL) {
        return;
    }
    const u32 lane = threadIdx.x % WARP_SIZE;
#pragma unroll
    for (int j = 0; j < DIMS; ++j) {
        if (j * WARP_SIZE < head_dim) {
            const float v = acc[j] * factor;
            const float amax = warp_max(fabsf(v));
            const float sum = warp_sum(v);
            const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
            const size_t index = out.index + j * WARP_SIZE;
            out.q[index + lane] = (u8)(__float2int_rn(v * inverse) & 0xff);
            if (out.halves != NULL) {
                out.halves[index + lane] = __half_as_ushort(__float2half_rn(v));
                if (out.half_scale != NULL && j == 0 && lane == 0) {
                    *out.half_scale = 1.0f;
                }
            }
            if (lane == 0) {
                out.q_scales[index / Q8_BLOCK] = make_float2(amax / 127.0f, sum);
            }
        }
    }
}

// Merges one query head's states of every split, the first at `states` and each split_stride
// floats after the previous, into its output row. The whole warp calls it. A split that attended
// to nothing has max -inf, sum 0 and a zero output, and weighs 0. The reads bypass L1 (__ldcg),
// which could hold a line read before the other blocks wrote it (one shared with a neighbouring
// task's states, read by an earlier merge on this SM).
template <int DIMS>
__device__ void merge_splits(const float *states, size_t split_stride, u32 n_splits, u32 head_dim,
                             const HeadOutput &out) {
    const u32 lane = threadIdx.x % WARP_SIZE;
    float max_value = -INFINITY;
    for (u32 s = lane; s < n_splits; s += WARP_SIZE) {
        max_value = fmaxf(max_value, __ldcg(states + s * split_stride));
    }
    max_value = warp_max(max_value);
    float total = 0.0f;
    float acc[DIMS];
#pragma unroll
    for (int j = 0; j < DIMS; ++j) {
        acc[j] = 0.0f;
    }
    for (u32 first = 0; first < n_splits; first += WARP_SIZE) {
        // Lane l weighs split first + l; the warp then takes the splits' outputs in turn, so that
        // their loads do not wait on one another.
        float factor = 0.0f;
        if (first + lane < n_splits) {
            const float *state = states + (first + lane) * split_stride;
            const float split_max = __ldcg(state);
            if (split_max != -INFINITY) {
                factor = expf(split_max - max_value);
                total += __ldcg(state + 1) * factor;
            }
        }
        const u32 count = min(n_splits - first, (u32)WARP_SIZE);
#pragma unroll 4
        for (u32 t = 0; t < count; ++t) {
            const float f = __shfl_sync(FULL_MASK, factor, t);
            const float *values = states + (first + t) * split_stride + 2;
#pragma unroll
            for (int j = 0; j < DIMS; ++j) {
                const u32 d = lane + j * WARP_SIZE;
                if (d < head_dim) {
                    acc[j] = fmaf(__ldcg(values + d), f, acc[j]);
                }
            }
        }
    }
    total = warp_sum(total);
    store_output<DIMS>(acc, total > 0.0f ? 1.0f / total : 0.0f, out, head_dim);
}

// Every kernel here takes these parameters. One block per (task, split), ATTENTION_WARPS warps. A
// task is (query row, KV head, chunk of heads_per_block query heads of that KV head's group),
// numbered in that order. In the attention_rows kernels (rows_per_block > 1, a group of one
// chunk), the task of a row whose index in its sequence is a multiple of rows_per_block serves it
// and up to rows_per_block - 1 rows after it, warp w row w / heads_per_block and head
// w % heads_per_block; the other rows' tasks have nothing to do. Dynamic shared memory holds the
// block's queries (rows_per_block x heads_per_block x head_dim), then a tile's key rows (tile_keys
// x key_stride) and value rows (tile_keys x head_dim); key_stride is a multiple of 4 when head_dim
// is, and TILE_LOADS elements a thread cover a tile. `partials` holds n_splits x rows_per_block x
// heads_per_block states of head_dim + 2 floats per task, `counters` one counter per task; neither
// is used with one split. `out_q` and `out_scales` are the output's int8 copy, or NULL when
// head_dim is no multiple of Q8_BLOCK; `out_halves` and `out_half_scales` its f16 copy and row
// scales, or NULL.
#define ATTENTION_PARAMS                                                                                 \
    const float *q, const u16 *k_pool, const u16 *v_pool, const u32 *sequences, u32 n_sequences,          \
        const u32 *block_tables, const u32 *tree_parents, FastDivisor block_size, u32 n_rows, u32 n_heads, \
        u32 n_kv_heads, u32 head_dim, float scale, u32 heads_per_block, u32 rows_per_block, u32 tile_keys, \
        u32 key_stride, u32 n_splits, float *partials, u32 *counters, float *out, u8 *out_q,              \
        float2 *out_scales, u16 *out_halves, float *out_half_scales
#define ATTENTION_ARGS                                                                                   \
    q, k_pool, v_pool, sequences, n_sequences, block_tables, tree_parents, block_size, n_rows, n_heads,   \
        n_kv_heads, head_dim, scale, heads_per_block, rows_per_block, tile_keys, key_stride, n_splits,    \
        partials, counters, out, out_q, out_scales, out_halves, out_half_scales

// One block's work, for heads of up to DIMS * 32 dimensions, rows_per_block rows with ROWS and one
// without (decode: every warp then follows the same row, with no second key range to keep).
template <int DIMS, bool ROWS>
__device__ void attend_block(ATTENTION_PARAMS) {
    // Until attend_tiles waits for the kernel before, only what earlier steps and the host wrote
    // is read: the batch description, block tables and committed keys and values.
    extern __shared__ float4 shared_rows[];
    __shared__ bool merges;

    const u32 group = n_heads / n_kv_heads;
    const u32 chunks = (group + heads_per_block - 1) / heads_per_block;
    const u32 rows = ROWS ? rows_per_block : 1;
    const u32 task = blockIdx.x / n_splits;
    const u32 split = blockIdx.x % n_splits;
    const u32 row = task / (n_kv_heads * chunks);
    const u32 kv_head = task / chunks % n_kv_heads;
    const u32 chunk = task % chunks;
    const u32 first_head = kv_head * group + chunk * heads_per_block;
    const u32 block_heads = min(heads_per_block, group - chunk * heads_per_block);
    const u32 warp = threadIdx.x / WARP_SIZE;
    const u32 warp_row = ROWS ? warp / heads_per_block : 0;
    const u32 warp_head = ROWS ? warp % heads_per_block : warp;
    // These exits depend on the row alone, so all of a task's splits take them or none does, and
    // its counter stays balanced either way.
    if (row >= n_rows) {
        return;
    }

    // Rows are packed in sequence order: find the first sequence that ends after `row`.
    u32 lo = 0, hi = n_sequences;
    while (lo < hi) {
        const u32 mid = (lo + hi) / 2;
        const u32 *s = sequences + mid * SEQ_FIELDS;
        if (s[0] + s[1] <= row) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo >= n_sequences) {
        return;
    }
    const u32 *seq = sequences + lo * SEQ_FIELDS;
    const u32 i = row - seq[0];
    // The block of the sequence's row i - i % rows serves this row.
    if (i % rows != 0) {
        return;
    }
    const u32 block_rows = ROWS ? min(rows, seq[1] - i) : 1;
    const bool active = warp_row < block_rows && warp_head < block_heads;
    const size_t kv_row_len = (size_t)n_kv_heads * head_dim, kv_offset = (size_t)kv_head * head_dim;
    // The last row sees the most keys; every row's keys lie below its end.
    const KeyRange fetch =
        keys_of_row(seq, block_tables, tree_parents, block_size, i + block_rows - 1, kv_row_len, kv_offset);
    const KeyRange own = ROWS ? keys_of_row(seq, block_tables, tree_parents, block_size,
                                            i + min(warp_row, block_rows - 1), kv_row_len, kv_offset)
                              : fetch;
    const u32 n_tiles = (fetch.end + tile_keys - 1) / tile_keys;
    // A short row uses fewer splits than the launch has, so that it does not pay for writing and
    // merging the states of blocks that had next to nothing to read. The count depends on the row
    // alone, so all of a task's blocks agree on it; the blocks past it leave at once.
    const u32 used_splits = max(1u, min(n_splits, n_tiles / MIN_SPLIT_TILES));
    if (split >= used_splits) {
        return;
    }

    Tiles tiles;
    tiles.q_rows = (float *)shared_rows;
    tiles.k_rows = tiles.q_rows + rows * heads_per_block * head_dim;
    tiles.v_rows = tiles.k_rows + tile_keys * key_stride;
    tiles.n_keys = tile_keys;
    tiles.key_stride = key_stride;
    tiles.head_dim = head_dim;
    // The chunk's heads are consecutive in each query row.
    BlockQueries queries;
    queries.first = q + ((size_t)row * n_heads + first_head) * head_dim;
    queries.row_stride = (size_t)n_heads * head_dim;
    queries.n_rows = block_rows;
    queries.n_heads = block_heads;

    HeadState<DIMS> state;
    state.max = -INFINITY;
    state.sum = 0.0f;
#pragma unroll
    for (int j = 0; j < DIMS; ++j) {
        state.acc[j] = 0.0f;
    }
    const u32 first_tile = (u32)((u64)n_tiles * split / used_splits);
    const u32 last_tile = (u32)((u64)n_tiles * (split + 1) / used_splits);
    if (head_dim % 4 == 0) {
        attend_tiles<float4>(state, tiles, queries, k_pool, v_pool, fetch, own, first_tile, last_tile, active,
                             scale, n_rows <= DECODE_ROWS);
    } else {
        attend_tiles<float>(state, tiles, queries, k_pool, v_pool, fetch, own, first_tile, last_tile, active,
                            scale, n_rows <= DECODE_ROWS);
    }

    const u32 warp_query_row = row + warp_row;
    HeadOutput head_out;
    head_out.out = out;
    head_out.q = out_q;
    head_out.q_scales = out_scales;
    head_out.halves = out_halves;
    head_out.half_scale =
        first_head + warp_head == 0 && out_half_scales != NULL ? out_half_scales + warp_query_row : NULL;
    head_out.index = ((size_t)warp_query_row * n_heads + first_head + warp_head) * head_dim;
    if (used_splits == 1) {
        if (active) {
            store_output<DIMS>(state.acc, state.sum > 0.0f ? 1.0f / state.sum : 0.0f, head_out, head_dim);
        }
        return;
    }
    // This split's state of each head: max, sum, then the output scaled by exp(-max).
    const size_t state_len = head_dim + 2;
    const size_t split_stride = (size_t)rows * heads_per_block * state_len;
    float *task_states = partials + (size_t)task * n_splits * split_stride;
    if (active) {
        float *own = task_states + split * split_stride + warp * state_len;
        if (threadIdx.x % WARP_SIZE == 0) {
            own[0] = state.max;
            own[1] = state.sum;
        }
        store_dims<DIMS>(state.acc, 1.0f, own + 2, head_dim);
    }
    // Every thread fences its own writes, and the barrier puts all those fences before the count:
    // a block that sees this block counted also sees its whole state.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        merges = atomicAdd(&counters[task], 1u) == used_splits - 1;
    }
    __syncthreads();
    if (!merges) {
        return;
    }
    // Orders the reads of the other splits' states after the count that showed them all done.
    __threadfence();
    if (active) {
        merge_splits<DIMS>(task_states + warp * state_len, split_stride, used_splits, head_dim, head_out);
    }
    // Every split has counted itself, so nothing else touches the counter in this launch.
    if (threadIdx.x == 0) {
        counters[task] = 0;
    }
}

extern "C" __global__ void __launch_bounds__(ATTENTION_WARPS * WARP_SIZE, 4)
    attention_dim128(ATTENTION_PARAMS) {
    attend_block<SMALL_HEAD_DIM / WARP_SIZE, false>(ATTENTION_ARGS);
}

extern "C" __global__ void attention_dim512(ATTENTION_PARAMS) {
    attend_block<MAX_HEAD_DIM / WARP_SIZE, false>(ATTENTION_ARGS);
}

extern "C" __global__ void __launch_bounds__(ATTENTION_WARPS * WARP_SIZE, 4)
    attention_rows_dim128(ATTENTION_PARAMS) {
    attend_block<SMALL_HEAD_DIM / WARP_SIZE, true>(ATTENTION_ARGS);
}

extern "C" __global__ void attention_rows_dim512(ATTENTION_PARAMS) {
    attend_block<MAX_HEAD_DIM / WARP_SIZE, true>(ATTENTION_ARGS);
}
