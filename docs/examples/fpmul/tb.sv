// A plain testbench around the Verilog of `memwall generate arith-fpmul`: what a user writes
// around a generated block, with nothing from memwall but the Verilog, its manifest and vectors.
// run.py writes vectors.vh (the counts and widths, from the manifest), inputs.hex (packed
// payloads) and expected.hex (the golden model's products); this bench drives one input a cycle
// and checks every result in order. Latency is not assumed: results are counted as they come.
`timescale 1ns / 1ps
`include "vectors.vh"

module tb;
  reg clk = 1'b0;
  reg rst = 1'b1;
  reg i__valid = 1'b0;
  reg [`IN_W-1:0] i__payload = {`IN_W{1'b0}};
  wire o__valid;
  wire [`OUT_W-1:0] o__payload;

  reg [`IN_W-1:0] inputs [0:`N-1];
  reg [`OUT_W-1:0] expected [0:`N-1];
  integer sent = 0;
  integer got = 0;
  integer errors = 0;
  integer cycles = 0;

  arith_fpmul dut (
    .clk(clk), .rst(rst),
    .i__valid(i__valid), .i__payload(i__payload),
    .o__valid(o__valid), .o__payload(o__payload)
  );

  always #5 clk = ~clk;

  initial begin
    $readmemh("inputs.hex", inputs);
    $readmemh("expected.hex", expected);
  end

  always @(posedge clk) begin
    cycles <= cycles + 1;
    if (cycles == `RESET_CYCLES - 1)   // the manifest's reset: synchronous, active high
      rst <= 1'b0;
    if (!rst) begin
      if (sent < `N) begin
        i__valid <= 1'b1;
        i__payload <= inputs[sent];
        sent <= sent + 1;
      end else begin
        i__valid <= 1'b0;
      end
      if (o__valid === 1'b1) begin
        if (o__payload !== expected[got]) begin
          if (errors < 10)
            $display("FAIL: result %0d is %h, expected %h", got, o__payload, expected[got]);
          errors = errors + 1;
        end
        got <= got + 1;
      end else if (o__valid !== 1'b0) begin
        $display("FAIL: o__valid is %b after reset (cycle %0d)", o__valid, cycles);
        errors = errors + 1;
      end
    end
    if (got == `N || cycles > `N + 1000) begin
      if (got == `N && errors == 0)
        $display("PASS: %0d products bit for bit", got);
      else
        $display("FAIL: %0d of %0d results, %0d wrong", got, `N, errors);
      $finish;
    end
  end
endmodule
