-- Restarts, READDIRs and the highest cookie asked for, per listing, over the tables of
-- `nfs-readdir export` (views `listings` and `rpc`; README, "Many traces in one engine").
SELECT l.kernel, l.trace, l.listing, l.comm, l.dir_fileid, l.ending, l.restarts,
       count(r.ts) AS readdirs, max(r.cookie) AS max_cookie
FROM listings l LEFT JOIN rpc r USING (trace_id, listing)
GROUP BY l.kernel, l.trace, l.trace_id, l.listing, l.comm, l.dir_fileid, l.ending, l.restarts
ORDER BY l.kernel NULLS FIRST, l.trace, l.trace_id, l.listing
