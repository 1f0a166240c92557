-- upgrades.lua: state an earlier library wrote in a layout no current command reads, taken in
-- by the partition's next ds_maintenance or ds_schedule (the scheduler's take-over runs one
-- on every partition it is assigned, before anything is scheduled there). Every other layout
-- an earlier library wrote is read as it is (docs/store.md, Upgrades).
-- Holds: adopt_leading_18.
-- Needs: KEY_SUFFIXES (Python); digest_key, ready_key, timeline_key, waiting_key (keys);
--   format_float, format_timeline_meta, parse_digest_meta, parse_timeline_meta, ttl_ms
--   (encoding); refresh_partition_ttl (helpers); decode_inline, holds_no_records, read_head
--   (containers); store_batch, write_meta (container_writes).

-- Library 18 kept a leading digest in flight (published, not acknowledged yet: the ingest
-- killed, or a refused publish not reclaimed yet) only in the partition's leading hash T:l:
-- digest id -> '>dH' (its policy's ttl, the timeline name's length), the name, then the
-- digest as an inline container; its timeline already as the digest's close would leave it
-- (WAITING, cooling down since the add). Library 19 dropped the hash and its commands.

-- Each digest of T:l becomes what the leading edge leaves today: the timeline's open digest
-- under the same id, and the timeline WAITING due at the digest's opened_at (the state
-- maintenance leaves a lost delivery in: the next schedule announces it, delivery reopens
-- and publishes that very digest), or READY as it was; the timeline's leftover container
-- goes if it is a meta alone, else its records wait behind the digest (marked so). When
-- another digest of the timeline is open meanwhile, the records wait behind that one
-- instead (a new id carries them), as 18's ds_reclaim did. The hash goes in the same call:
-- a second call, from any instance, finds nothing. One EXISTS when there is no hash.
local function adopt_leading_18(tag, partition_ttl)
    local key = tag .. ':' .. KEY_SUFFIXES.leading
    if redis.call('EXISTS', key) == 0 then
        return
    end
    local flat, longest = redis.call('HGETALL', key), partition_ttl
    for i = 2, #flat, 2 do
        local value = flat[i]
        local ttl, length, position = struct.unpack('>dH', value) -- its head
        local name = string.sub(value, position, position + length - 1)
        local blob = string.sub(value, position + length)
        local ms = ttl_ms(ttl)
        longest = math.max(longest, ttl)
        local digest, timeline = digest_key(tag, name), timeline_key(tag, name)
        local head = read_head(timeline)
        local raw_meta, records = decode_inline(blob)
        if redis.call('EXISTS', digest) == 1 then
            if head.kind == 'none' then
                head.meta = format_timeline_meta({written = 0, dropped = 0, behind_open = true})
            end
            store_batch(tag, timeline, head, records, 0, 0, ms)
        else
            redis.call('SET', digest, blob, 'PX', ms)
            if holds_no_records(timeline, head) then
                redis.call('DEL', timeline)
            else
                local meta = parse_timeline_meta(head.meta)
                meta.behind_open = true
                write_meta(timeline, head, format_timeline_meta(meta))
            end
            if redis.call('ZSCORE', ready_key(tag), name) == false then
                local parsed = parse_digest_meta(raw_meta) -- nil: unreadable, due at once
                redis.call('ZADD', waiting_key(tag), format_float(parsed and parsed.opened_at or 0),
                    name)
            end
        end
    end
    redis.call('DEL', key)
    refresh_partition_ttl(tag, longest)
end
