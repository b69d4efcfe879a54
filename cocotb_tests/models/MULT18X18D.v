// Simulation model of the Lattice ECP5 18 x 18 multiplier block (MULT18X18D), for simulating the
// Verilog that memwall writes for the ECP5 (`memwall generate --target ecp5`, hdl/arith/dsp.py).
//
// It models the configurations hdl/arith/dsp.py instantiates and their neighbours: A and B from
// the A and B ports (SOURCEA = SOURCEB = 0), each optionally registered, an optional pipeline
// register and an optional output register, every register on CLK0 with clock enable CE0 and
// synchronous reset RST0 (RESETMODE "SYNC"), power-on value 0; SIGNEDA and SIGNEDB select
// two's-complement operands and follow A and B through their registers. Any other clock, enable
// or reset choice, or the bypass, stops elaboration (an unknown module named for what is
// unmodelled); SOURCEA or SOURCEB set (the cascade inputs) stops the simulation with a message.
// The C input is not used by the multiplier and is ignored. Only the ports hdl/arith/dsp.py
// connects are declared.
module MULT18X18D(
    A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15, A16, A17, B0, B1, B2,
    B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15, B16, B17, C0, C1, C2, C3, C4, C5,
    C6, C7, C8, C9, C10, C11, C12, C13, C14, C15, C16, C17, SIGNEDA, SIGNEDB, SOURCEA, SOURCEB,
    CLK0, CE0, RST0, P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15, P16,
    P17, P18, P19, P20, P21, P22, P23, P24, P25, P26, P27, P28, P29, P30, P31, P32, P33, P34, P35
);
    input A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15, A16, A17;
    input B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15, B16, B17;
    input C0, C1, C2, C3, C4, C5, C6, C7, C8, C9, C10, C11, C12, C13, C14, C15, C16, C17;
    input SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK0, CE0, RST0;
    output P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15, P16, P17;
    output P18, P19, P20, P21, P22, P23, P24, P25, P26, P27, P28, P29, P30, P31, P32, P33, P34, P35;

    parameter REG_INPUTA_CLK = "NONE";
    parameter REG_INPUTB_CLK = "NONE";
    parameter REG_INPUTC_CLK = "NONE";
    parameter REG_PIPELINE_CLK = "NONE";
    parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_INPUTA_CE = "CE0";
    parameter REG_INPUTA_RST = "RST0";
    parameter REG_INPUTB_CE = "CE0";
    parameter REG_INPUTB_RST = "RST0";
    parameter REG_PIPELINE_CE = "CE0";
    parameter REG_PIPELINE_RST = "RST0";
    parameter REG_OUTPUT_CE = "CE0";
    parameter REG_OUTPUT_RST = "RST0";
    parameter GSR = "ENABLED";
    parameter RESETMODE = "SYNC";
    parameter MULT_BYPASS = "DISABLED";
    parameter SOURCEB_MODE = "B_SHIFT";

    localparam IN_A = REG_INPUTA_CLK == "CLK0";
    localparam IN_B = REG_INPUTB_CLK == "CLK0";
    localparam PIPE = REG_PIPELINE_CLK == "CLK0";
    localparam OUT = REG_OUTPUT_CLK == "CLK0";

    generate
        if ((REG_INPUTA_CLK != "NONE" && !IN_A) || (REG_INPUTB_CLK != "NONE" && !IN_B)
                || (REG_PIPELINE_CLK != "NONE" && !PIPE) || (REG_OUTPUT_CLK != "NONE" && !OUT))
            MULT18X18D_model_supports_only_CLK0_registers unmodelled();
        if (REG_INPUTA_CE != "CE0" || REG_INPUTB_CE != "CE0" || REG_PIPELINE_CE != "CE0"
                || REG_OUTPUT_CE != "CE0" || REG_INPUTA_RST != "RST0" || REG_INPUTB_RST != "RST0"
                || REG_PIPELINE_RST != "RST0" || REG_OUTPUT_RST != "RST0")
            MULT18X18D_model_supports_only_CE0_and_RST0 unmodelled();
        if (RESETMODE != "SYNC")
            MULT18X18D_model_supports_only_synchronous_reset unmodelled();
        if (MULT_BYPASS != "DISABLED")
            MULT18X18D_model_does_not_support_the_bypass unmodelled();
    endgenerate

    wire [17:0] a_in = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0};
    wire [17:0] b_in = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
    reg [17:0] a_reg = 18'd0, b_reg = 18'd0;
    reg sa_reg = 1'b0, sb_reg = 1'b0;
    always @(posedge CLK0) begin
        if (RST0) begin
            a_reg <= 18'd0; b_reg <= 18'd0; sa_reg <= 1'b0; sb_reg <= 1'b0;
        end else if (CE0) begin
            a_reg <= a_in; b_reg <= b_in; sa_reg <= SIGNEDA; sb_reg <= SIGNEDB;
        end
    end
    wire [17:0] a = IN_A ? a_reg : a_in;
    wire [17:0] b = IN_B ? b_reg : b_in;
    wire sa = IN_A ? sa_reg : SIGNEDA;
    wire sb = IN_B ? sb_reg : SIGNEDB;
    // 36-bit two's-complement product of the operands, each extended by its sign when signed.
    wire signed [36:0] a_ext = {{19{sa & a[17]}}, a};
    wire signed [36:0] b_ext = {{19{sb & b[17]}}, b};
    wire signed [73:0] full = a_ext * b_ext;
    wire [35:0] product = full[35:0];

    reg [35:0] pipe_reg = 36'd0, out_reg = 36'd0;
    wire [35:0] piped = PIPE ? pipe_reg : product;
    always @(posedge CLK0) begin
        if (RST0) begin
            pipe_reg <= 36'd0; out_reg <= 36'd0;
        end else if (CE0) begin
            pipe_reg <= product; out_reg <= piped;
        end
    end
    assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0} = OUT ? out_reg : piped;

    // SOURCEA / SOURCEB select the cascade inputs, which are not modelled.
    always @(posedge CLK0)
        if (SOURCEA !== 1'b0 || SOURCEB !== 1'b0) begin
            $display("MULT18X18D %m: SOURCEA/SOURCEB set: the cascade inputs are not modelled");
            $finish;
        end
endmodule
